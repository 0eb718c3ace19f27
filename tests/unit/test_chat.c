/*
 * test_chat.c — chat.h: message normalisation, the built-in templates (ChatML, Gemma), and
 * prompt tokenization where only the template's markup may become control
 * tokens (vocab_tokenize_masked), and system messages where they stand
 * (chat_render_placed) over the 50 real templates of ../shared/golden.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "test.h"

static const char *shared;

static bool same(const dj_token *a, size_t na, const dj_token *b, size_t nb) {
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

static void set_bits(uint8_t *m, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) m[i / 8] |= (uint8_t)(1u << (i % 8));
}

static void test_masked_tokenize(void) {
    struct dj_vocab *v = NULL;
    CHECK(dj_vocab_load_file(test_shared_path(shared, "vocab/ggml-vocab-deepseek-coder.gguf"), &v) == DJ_OK);
    if (!v) return;
    const dj_token eos = vocab_eos(v);
    const char *sp = vocab_token_text(v, eos); /* a control token's text */
    const size_t ns = strlen(sp);
    /* template markup + user text holding the same marker + markup */
    char text[512];
    const char *user = "hello ";
    snprintf(text, sizeof text, "%s%s%s x%s", sp, user, sp, sp);
    const size_t n = strlen(text);
    const size_t u0 = ns, u1 = ns + strlen(user) + ns + 2; /* the user's bytes: "hello <eos> x" */
    uint8_t mask[64] = {0};
    set_bits(mask, u0, u1);
    dj_token *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    CHECK(vocab_tokenize_masked(v, text, n, false, true, mask, &a, &na) == DJ_OK);
    /* expected: eos, the user's bytes as plain text, eos */
    CHECK(vocab_tokenize(v, text + u0, u1 - u0, false, false, &b, &nb) == DJ_OK);
    size_t n_eos = 0;
    for (size_t i = 0; i < na; i++) n_eos += a[i] == eos;
    CHECKF(n_eos == 2, "control tokens matched: %zu, want the template's 2", n_eos);
    CHECK(na == nb + 2 && a[0] == eos && a[na - 1] == eos && same(a + 1, na - 2, b, nb));
    /* unmasked, the user's marker is the token */
    CHECK(vocab_tokenize(v, text, n, false, true, &c, &nc) == DJ_OK);
    n_eos = 0;
    for (size_t i = 0; i < nc; i++) n_eos += c[i] == eos;
    CHECK(n_eos == 3);
    free(a);
    free(b);
    free(c);
    /* a marker with only its last byte from the input is not matched either */
    memset(mask, 0, sizeof mask);
    set_bits(mask, ns - 1, ns);
    CHECK(vocab_tokenize_masked(v, text, n, false, true, mask, &a, &na) == DJ_OK);
    CHECK(na > 0 && a[0] != eos);
    free(a);
    /* no mask = vocab_tokenize with parse_special */
    CHECK(vocab_tokenize_masked(v, text, n, true, true, NULL, &a, &na) == DJ_OK);
    CHECK(vocab_tokenize(v, text, n, true, true, &b, &nb) == DJ_OK);
    CHECK(same(a, na, b, nb));
    free(a);
    free(b);
    dj_vocab_free(v);
}

static void test_normalize(void) {
    json_t *m = json_loads("[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
                           "{\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": null, "
                           "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
                           "\"arguments\": \"{\\\"x\\\": 1}\"}}]}, {\"role\": \"user\", \"content\": [{\"type\": "
                           "\"image_url\", \"image_url\": {\"url\": \"u\"}}]}]",
                           0, NULL);
    json_t *n = chat_normalize_messages(m);
    CHECK(n != NULL);
    if (n) {
        json_t *m0 = json_array_get(n, 0), *m1 = json_array_get(n, 1), *m2 = json_array_get(n, 2);
        CHECK(json_is_string(json_object_get(m0, "content")) &&
              !strcmp(json_string_value(json_object_get(m0, "content")), "a\nb"));
        CHECK(json_is_string(json_object_get(m1, "content")) && !json_string_length(json_object_get(m1, "content")));
        json_t *args = json_object_get(json_object_get(json_array_get(json_object_get(m1, "tool_calls"), 0), "function"),
                                       "arguments");
        CHECK(json_is_object(args) && json_integer_value(json_object_get(args, "x")) == 1);
        CHECK(json_is_array(json_object_get(m2, "content"))); /* not text: left to the template */
        /* the input is not modified */
        CHECK(json_is_array(json_object_get(json_array_get(m, 0), "content")));
    }
    json_decref(n);
    json_decref(m);
    json_t *bad = json_loads("[1]", 0, NULL);
    CHECK(chat_normalize_messages(bad) == NULL && strstr(dj_last_error(), "messages[0]"));
    json_decref(bad);
}

/* The built-in template renders the traces' ChatML/Hermes format. */
static void test_builtin(void) {
    struct dj_chat_template *t = NULL;
    CHECK(chat_template_create(NULL, 0, "<s>", "</s>", &t) == DJ_OK);
    if (!t) return;
    CHECK(t->builtin && t->syn.tools == DJ_TOOLS_HERMES);
    json_t *m = json_loads("[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"U\"}, "
                           "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c\", \"type\": "
                           "\"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}, "
                           "{\"role\": \"tool\", \"tool_call_id\": \"c\", \"content\": \"R\"}]",
                           0, NULL);
    json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]", 0, NULL);
    struct dj_jinja_out o = {0};
    CHECKF(chat_render(t, m, tools, NULL, true, 0, &o) == DJ_OK, "%s", dj_last_error());
    const char *want_tail = "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", "
                            "\"arguments\": {\"a\": 1}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nR\n"
                            "</tool_response><|im_end|>\n<|im_start|>assistant\n";
    CHECKF(o.text && o.n > strlen(want_tail) && !strcmp(o.text + o.n - strlen(want_tail), want_tail), "got:\n%s",
           o.text ? o.text : "(null)");
    CHECK(o.text && !strncmp(o.text, "<|im_start|>system\nS\n\n# Tools", 29));
    /* "U" came from the input, "<|im_start|>user\n" did not */
    if (o.text) {
        const char *u = strstr(o.text, "user\nU") + 5;
        const size_t iu = (size_t)(u - o.text);
        const size_t im = iu - 6; /* the '>' of "<|im_start|>" */
        CHECK(o.from_input && (o.from_input[iu / 8] >> (iu % 8) & 1) && !(o.from_input[im / 8] >> (im % 8) & 1));
    }
    jinja_out_free(&o);
    json_decref(m);
    json_decref(tools);
    chat_template_free(t);
}

/* Renders msgs (a JSON text) with chat_render_placed; *how set; the text (malloc'd) or NULL. */
static char *placed(const struct dj_chat_template *t, const char *msgs, enum dj_system_placement *how) {
    json_t *m = json_loads(msgs, 0, NULL);
    struct dj_jinja_out o = {0};
    char *text = NULL;
    if (m && chat_render_placed(t, m, NULL, NULL, true, 0, &o, how) == DJ_OK) text = strdup(o.text ? o.text : "");
    jinja_out_free(&o);
    json_decref(m);
    return text;
}

static bool renders(const struct dj_chat_template *t, const char *msgs) {
    json_t *m = json_loads(msgs, 0, NULL);
    struct dj_jinja_out o = {0};
    const bool ok = m && chat_render(t, m, NULL, NULL, true, 0, &o) == DJ_OK;
    jinja_out_free(&o);
    json_decref(m);
    return ok;
}

/* Every real template renders system messages at any position — as a system turn where it
 * has one, else folded into the user turn beside them — whenever it renders the same
 * conversation without them: a system message after an assistant turn, and one after the
 * last user message (where Claude Code 2.1 puts its environment).  The texts are all in the
 * prompt; "as is" renders equal chat_render's.  Prints each template's placement (the table
 * in docs/SERVER.md). */
static void test_system_placement(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/golden/chat_templates/templates", shared);
    DIR *d = opendir(dir);
    CHECKF(d != NULL, "cannot open %s", dir);
    if (!d) return;
    static const char *const base_msgs =
        "[{\"role\": \"system\", \"content\": \"SYS-ONE\"}, {\"role\": \"user\", \"content\": \"hello\"}, "
        "{\"role\": \"assistant\", \"content\": \"hi there\"}, {\"role\": \"user\", \"content\": \"next\"}]";
    static const char *const mid_msgs =
        "[{\"role\": \"system\", \"content\": \"SYS-ONE\"}, {\"role\": \"user\", \"content\": \"hello\"}, "
        "{\"role\": \"assistant\", \"content\": \"hi there\"}, {\"role\": \"system\", \"content\": \"SYS-TWO\"}, "
        "{\"role\": \"user\", \"content\": \"next\"}]";
    static const char *const end_msgs =
        "[{\"role\": \"user\", \"content\": \"hello\"}, {\"role\": \"system\", \"content\": \"SYS-END\"}]";
    static const char *const user_only = "[{\"role\": \"user\", \"content\": \"hello\"}]";
    struct dirent *e;
    int n = 0, n_as_is = 0, n_later = 0, n_all = 0;
    while ((e = readdir(d))) {
        const size_t len = strlen(e->d_name);
        if (len < 7 || strcmp(e->d_name + len - 6, ".jinja")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        char *src = malloc(1 << 20);
        const size_t ns = src ? fread(src, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        struct dj_chat_template *t = NULL;
        if (!src || chat_template_create(src, ns, "<|bos|>", "<|eos|>", &t) != DJ_OK) {
            free(src);
            continue;
        }
        free(src);
        n++;
        enum dj_system_placement how_mid = DJ_SYSTEM_AS_IS, how_end = DJ_SYSTEM_AS_IS;
        if (renders(t, base_msgs)) {
            char *text = placed(t, mid_msgs, &how_mid);
            CHECKF(text && strstr(text, "SYS-ONE") && strstr(text, "SYS-TWO"), "%s: a mid-conversation system message: %s",
                   e->d_name, text ? text : dj_last_error());
            if (text && how_mid == DJ_SYSTEM_AS_IS) {
                json_t *m = json_loads(mid_msgs, 0, NULL);
                struct dj_jinja_out o = {0};
                CHECK(chat_render(t, m, NULL, NULL, true, 0, &o) == DJ_OK && o.text && !strcmp(o.text, text));
                jinja_out_free(&o);
                json_decref(m);
            }
            free(text);
        }
        if (renders(t, user_only)) {
            char *text = placed(t, end_msgs, &how_end);
            CHECKF(text && strstr(text, "SYS-END") && strstr(text, "hello"), "%s: a system message after the user's: %s",
                   e->d_name, text ? text : dj_last_error());
            free(text);
        }
        const enum dj_system_placement how = how_mid > how_end ? how_mid : how_end;
        n_as_is += how == DJ_SYSTEM_AS_IS;
        n_later += how == DJ_SYSTEM_FOLDED_LATER;
        n_all += how == DJ_SYSTEM_FOLDED_ALL;
        printf("system placement: %-55s %s\n", e->d_name,
               how == DJ_SYSTEM_AS_IS ? "as is" : how == DJ_SYSTEM_FOLDED_LATER ? "later ones folded" : "all folded");
        chat_template_free(t);
    }
    closedir(d);
    printf("system placement: %d templates: %d as is, %d fold the later ones, %d fold all\n", n, n_as_is, n_later, n_all);
    CHECK(n == 50);

    /* the fold rule on a template that reads only messages[0] as the system prompt and drops the
     * others: appended to the user message before, else prepended to the one after, else a user turn */
    static const char src[] =
        "{% for m in messages %}{% if m.role == 'system' and loop.first %}[S]{{ m.content }}{% elif m.role != 'system' %}"
        "[{{ m.role }}]{{ m.content }}{% endif %}{% endfor %}";
    struct dj_chat_template *t = NULL;
    CHECK(chat_template_create(src, sizeof src - 1, "", "", &t) == DJ_OK);
    if (!t) return;
    enum dj_system_placement how;
    char *text = placed(t,
                        "[{\"role\": \"system\", \"content\": \"A\"}, {\"role\": \"user\", \"content\": \"u1\"}, "
                        "{\"role\": \"system\", \"content\": \"B\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, "
                        "{\"role\": \"system\", \"content\": \"C\"}, {\"role\": \"user\", \"content\": \"u2\"}, "
                        "{\"role\": \"assistant\", \"content\": \"a2\"}, {\"role\": \"system\", \"content\": \"D\"}]",
                        &how);
    CHECKF(text && !strcmp(text, "[S]A[user]u1\n\nB[assistant]a1[user]C\n\nu2[assistant]a2[user]D") &&
               how == DJ_SYSTEM_FOLDED_LATER,
           "got %s", text ? text : dj_last_error());
    free(text);
    /* a template that raises on any system message: all folded (the first into the user turn after it) */
    static const char src2[] = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role') }}"
                               "{% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}";
    chat_template_free(t);
    t = NULL;
    CHECK(chat_template_create(src2, sizeof src2 - 1, "", "", &t) == DJ_OK);
    if (!t) return;
    text = placed(t, "[{\"role\": \"system\", \"content\": \"A\"}, {\"role\": \"user\", \"content\": \"u1\"}]", &how);
    CHECKF(text && !strcmp(text, "[user]A\n\nu1") && how == DJ_SYSTEM_FOLDED_ALL, "got %s", text ? text : dj_last_error());
    free(text);
    /* nothing helps (the template raises on something else): its own error stands */
    static const char src3[] = "{{ raise_exception('never') }}";
    chat_template_free(t);
    t = NULL;
    CHECK(chat_template_create(src3, sizeof src3 - 1, "", "", &t) == DJ_OK);
    if (t) {
        CHECK(!placed(t, "[{\"role\": \"system\", \"content\": \"A\"}, {\"role\": \"user\", \"content\": \"u1\"}]", &how));
        CHECK(strstr(dj_last_error(), "never") != NULL);
    }
    chat_template_free(t);
}

/* The built-in Gemma template: Google's Gemma 2 template (../shared/golden) renders an
 * alternating conversation the same; a first system message is folded into the first turn as
 * Gemma 3's template does; a later one is folded by chat_render_placed; the choice by
 * architecture needs the markers in the vocabulary. */
static void test_builtin_gemma(void) {
    struct dj_chat_template *t = NULL, *g2 = NULL;
    CHECK(chat_template_create_builtin(DJ_CHAT_BUILTIN_GEMMA, "<bos>", "<eos>", &t) == DJ_OK);
    if (!t) return;
    CHECK(t->builtin && t->builtin_kind == DJ_CHAT_BUILTIN_GEMMA && !strcmp(chat_builtin_name(t->builtin_kind), "built-in Gemma"));
    CHECK(t->syn.tools == DJ_TOOLS_NONE);
    const char *conv = "[{\"role\": \"user\", \"content\": \"  Hello \"}, {\"role\": \"assistant\", \"content\": \"Hi\\n\"}, "
                       "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}]";
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/chat_templates/templates/google-gemma-2-2b-it.jinja", shared);
    size_t n = 0;
    char *src = test_read_file(path, &n);
    CHECKF(src != NULL, "cannot read %s", path);
    if (src && chat_template_create(src, n, "<bos>", "<eos>", &g2) == DJ_OK) {
        json_t *m = chat_normalize_messages(json_loads(conv, 0, NULL));
        struct dj_jinja_out a = {0}, b = {0};
        CHECK(m && chat_render(t, m, NULL, NULL, true, 0, &a) == DJ_OK && chat_render(g2, m, NULL, NULL, true, 0, &b) == DJ_OK);
        CHECKF(a.text && b.text && !strcmp(a.text, b.text), "built-in:\n%s\ngemma-2-2b-it:\n%s", a.text ? a.text : "",
               b.text ? b.text : "");
        CHECK(a.text && !strcmp(a.text, "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi<end_of_turn>\n"
                                        "<start_of_turn>user\na\nb<end_of_turn>\n<start_of_turn>model\n"));
        jinja_out_free(&a), jinja_out_free(&b);
        json_decref(m);
    }
    free(src);
    chat_template_free(g2);
    enum dj_system_placement how;
    char *text = placed(t, "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}]", &how);
    CHECKF(text && !strcmp(text, "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n") &&
               how == DJ_SYSTEM_AS_IS,
           "got %s", text ? text : dj_last_error());
    free(text);
    text = placed(t,
                  "[{\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a1\"}, "
                  "{\"role\": \"system\", \"content\": \"S2\"}, {\"role\": \"user\", \"content\": \"u2\"}]",
                  &how);
    CHECKF(text && !strcmp(text, "<bos><start_of_turn>user\nu1<end_of_turn>\n<start_of_turn>model\na1<end_of_turn>\n"
                                 "<start_of_turn>user\nS2\n\nu2<end_of_turn>\n<start_of_turn>model\n") &&
               how == DJ_SYSTEM_FOLDED_LATER,
           "got %s", text ? text : dj_last_error());
    free(text);
    chat_template_free(t);
    /* without a vocabulary holding <start_of_turn> / <end_of_turn>, or for another family: ChatML */
    CHECK(chat_builtin_for("gemma3", NULL) == DJ_CHAT_BUILTIN_CHATML);
    CHECK(chat_builtin_for("llama", NULL) == DJ_CHAT_BUILTIN_CHATML);
    CHECK(chat_builtin_for(NULL, NULL) == DJ_CHAT_BUILTIN_CHATML);
    CHECK(chat_template_create_builtin(DJ_CHAT_BUILTIN_CHATML, "<s>", "</s>", &t) == DJ_OK && t && t->builtin &&
          t->builtin_kind == DJ_CHAT_BUILTIN_CHATML && !strcmp(t->src, chat_builtin_chatml));
    chat_template_free(t);
}

/* bos_token / eos_token are the template's own text (matched as tokens by chat_tokenize), the
 * messages' text is input; a bos_token given in kwargs (the request's) is input too. */
static void test_bos_eos_owned(void) {
    static const char src[] = "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}";
    struct dj_chat_template *t = NULL;
    CHECK(chat_template_create(src, sizeof src - 1, "<B>", "<E>", &t) == DJ_OK);
    if (!t) return;
    json_t *m = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
    json_t *kw = json_loads("{\"bos_token\": \"<K>\"}", 0, NULL);
    struct dj_jinja_out o = {0};
    CHECK(chat_render(t, m, NULL, NULL, false, 0, &o) == DJ_OK && o.text && !strcmp(o.text, "<B>hi<E>"));
    if (o.text && o.n == 8) {
        const char want[] = "...^^...";
        for (size_t i = 0; i < 8; i++)
            CHECKF(((o.from_input && (o.from_input[i / 8] >> (i % 8) & 1)) ? '^' : '.') == want[i], "byte %zu", i);
    }
    jinja_out_free(&o);
    CHECK(chat_render(t, m, NULL, kw, false, 0, &o) == DJ_OK && o.text && !strcmp(o.text, "<K>hi<E>"));
    if (o.text && o.n == 8) {
        const char want[] = "^^^^^...";
        for (size_t i = 0; i < 8; i++)
            CHECKF(((o.from_input && (o.from_input[i / 8] >> (i % 8) & 1)) ? '^' : '.') == want[i], "kwargs: byte %zu", i);
    }
    jinja_out_free(&o);
    json_decref(m), json_decref(kw);
    chat_template_free(t);
}

int main(int argc, char **argv) {
    shared = argc > 1 ? argv[1] : "../shared";
    test_masked_tokenize();
    test_normalize();
    test_builtin();
    test_builtin_gemma();
    test_bos_eos_owned();
    test_system_placement();
    TEST_END();
}
