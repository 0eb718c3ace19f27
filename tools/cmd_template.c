/*
 * cmd_template.c — `deja template`: renders a chat template for one case
 * file, as Hugging Face transformers' apply_chat_template would
 * (src/chat/jinja.h).  The render context is exactly the case's kwargs, then
 * messages and add_generation_prompt; with -m MODEL the template comes from
 * the GGUF key tokenizer.chat_template and bos_token / eos_token from the
 * vocabulary are added when kwargs lacks them.
 *
 * Exit status: 0 rendered (the text on stdout, byte for byte), 1 the
 * template raised (or does not compile): "deja template: MESSAGE" on stderr,
 * 2 a usage or input error.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja.h"
#include "cli.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static void template_usage(FILE *f) {
    fprintf(f,
            "usage: deja template (-m MODEL | --template-file F) --case FILE.json [--now TIME] [--input-mask]\n"
            "  renders a chat template as transformers' apply_chat_template does and prints the text.\n"
            "  -m MODEL              the template of a GGUF model (tokenizer.chat_template); its vocabulary's\n"
            "                        bos_token / eos_token are added unless the case's kwargs has them\n"
            "  --template-file F     a Jinja template file (nothing is added to the context)\n"
            "  --case FILE.json      {\"messages\": [...], \"add_generation_prompt\": bool, \"kwargs\": {...}}:\n"
            "                        the context is kwargs (tools, documents, bos_token, ...), then messages\n"
            "                        and add_generation_prompt (object key order and int/float kept)\n"
            "  --now TIME            the clock of strftime_now(), YYYY-MM-DDTHH:MM:SS (naive, as UTC);\n"
            "                        default: the current time\n"
            "  --input-mask          after the text, print a line of '^' (byte from the context) and '.'\n"
            "                        (byte from the template) under it, one character per output byte\n"
            "  exit status: 0 rendered, 1 the template raised an exception (message on stderr), 2 usage error\n");
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "deja template: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    return 2;
}

/* "YYYY-MM-DDTHH:MM:SS" (or with a space) as seconds since the epoch, read as UTC. */
static bool parse_time(const char *s, int64_t *out) {
    struct tm tm = {0};
    char sep = 0;
    int k = sscanf(s, "%4d-%2d-%2d%c%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &sep, &tm.tm_hour, &tm.tm_min,
                   &tm.tm_sec);
    if (k == 3) sep = 'T', tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    else if (k != 7 || (sep != 'T' && sep != ' ')) return false;
    if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
        tm.tm_sec > 60)
        return false;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    *out = (int64_t)timegm(&tm);
    return true;
}

/* The template source and, from a model, its bos/eos token texts. */
static int load_model_template(const char *path, char **src, size_t *n, char **bos, char **eos) {
    struct gguf_ctx *g = NULL;
    if (gguf_open(path, &g) != DJ_OK) return usage_error("%s", dj_last_error());
    struct gguf_str tmpl;
    if (gguf_get_str(g, "tokenizer.chat_template", &tmpl) != DJ_OK) {
        gguf_close(g);
        return usage_error("%s: the model has no chat template (tokenizer.chat_template)", path);
    }
    *src = malloc(tmpl.len + 1);
    if (!*src) {
        gguf_close(g);
        return usage_error("%s", "out of memory");
    }
    memcpy(*src, tmpl.ptr, tmpl.len);
    (*src)[tmpl.len] = '\0';
    *n = tmpl.len;
    struct dj_vocab *v = NULL;
    if (vocab_load_gguf(g, &v) == DJ_OK) {
        const char *b = vocab_bos(v) >= 0 ? vocab_token_text(v, vocab_bos(v)) : NULL;
        const char *e = vocab_eos(v) >= 0 ? vocab_token_text(v, vocab_eos(v)) : NULL;
        *bos = b ? strdup(b) : NULL;
        *eos = e ? strdup(e) : NULL;
        dj_vocab_free(v);
    }
    gguf_close(g);
    return 0;
}

/* kwargs, then messages, then add_generation_prompt. */
static json_t *build_context(const json_t *c, const char *bos, const char *eos) {
    json_t *ctx = json_object();
    if (!ctx) return NULL;
    const json_t *kwargs = json_object_get(c, "kwargs");
    const char *key;
    json_t *v;
    if (json_is_object(kwargs)) {
        json_object_foreach((json_t *)kwargs, key, v) json_object_set(ctx, key, v);
    }
    if (bos && !json_object_get(ctx, "bos_token")) json_object_set_new(ctx, "bos_token", json_string(bos));
    if (eos && !json_object_get(ctx, "eos_token")) json_object_set_new(ctx, "eos_token", json_string(eos));
    json_t *msgs = json_object_get(c, "messages");
    json_object_set_new(ctx, "messages", msgs ? json_incref(msgs) : json_array());
    json_t *agp = json_object_get(c, "add_generation_prompt");
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(json_is_true(agp)));
    return ctx;
}

int cmd_template(int argc, char **argv) {
    const char *model = NULL, *tfile = NULL, *case_file = NULL, *now_s = NULL;
    bool mask = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            template_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) slot = &model;
        else if (!strcmp(a, "--template-file")) slot = &tfile;
        else if (!strcmp(a, "--case")) slot = &case_file;
        else if (!strcmp(a, "--now")) slot = &now_s;
        else if (!strcmp(a, "--input-mask")) mask = true;
        else {
            template_usage(stderr);
            return usage_error("unknown option '%s'", a);
        }
        if (slot && !(*slot = cli_value("template", argc, argv, &i))) return 2;
    }
    if (!!model == !!tfile) {
        template_usage(stderr);
        return usage_error("%s", "give exactly one of -m MODEL or --template-file F");
    }
    if (!case_file) {
        template_usage(stderr);
        return usage_error("%s", "no case given (--case FILE.json)");
    }
    int64_t now = (int64_t)time(NULL);
    if (now_s && !parse_time(now_s, &now)) return usage_error("--now '%s': expected YYYY-MM-DDTHH:MM:SS", now_s);

    char *src = NULL, *bos = NULL, *eos = NULL;
    size_t src_n = 0;
    if (tfile) {
        if (!(src = cli_read_file("template", tfile, &src_n))) return 2;
    } else {
        int rc = load_model_template(model, &src, &src_n, &bos, &eos);
        if (rc) return rc;
    }
    size_t case_n = 0;
    char *case_text = cli_read_file("template", case_file, &case_n);
    if (!case_text) {
        free(src), free(bos), free(eos);
        return 2;
    }
    json_error_t jerr;
    json_t *c = json_loadb(case_text, case_n, 0, &jerr);
    free(case_text);
    if (!json_is_object(c)) {
        free(src), free(bos), free(eos);
        json_decref(c);
        fprintf(stderr, "deja template: %s: line %d: %s\n", case_file, jerr.line, c ? "not a JSON object" : jerr.text);
        return 2;
    }
    json_t *ctx = build_context(c, bos, eos);
    json_decref(c);
    free(bos), free(eos);
    if (!ctx) {
        free(src);
        return usage_error("%s", "out of memory");
    }

    struct dj_jinja *t = NULL;
    int rc = 0;
    if (jinja_compile(src, src_n, &t) != DJ_OK) {
        fprintf(stderr, "deja template: %s\n", dj_last_error());
        rc = 1;
    } else {
        struct dj_jinja_out out = {0};
        if (jinja_render(t, ctx, now, &out) != DJ_OK) {
            fprintf(stderr, "deja template: %s\n", dj_last_error());
            rc = 1;
        } else {
            fwrite(out.text, 1, out.n, stdout);
            if (mask) {
                putchar('\n');
                for (size_t i = 0; i < out.n; i++)
                    putchar(out.from_input && ((out.from_input[i / 8] >> (i % 8)) & 1) ? '^' : '.');
                putchar('\n');
            }
            jinja_out_free(&out);
        }
        jinja_free(t);
    }
    json_decref(ctx);
    free(src);
    if (fflush(stdout) != 0) return 2;
    return rc;
}
