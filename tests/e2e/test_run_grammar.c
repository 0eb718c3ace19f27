/*
 * test_run_grammar.c — constrained generation from the command line:
 * `deja run --json-schema`, `--grammar`, `--tools` on codelm and stories260K
 * with random sampling seeds.  Every output that finishes parses as JSON and
 * is valid under the schema (checked here by hand, independently of the
 * grammar engine); skipping on and off give the same ids; the JSON reports
 * finish_reason, n_forward_passes and the schema_tokens_* counters; bad
 * grammars, schemas and flag combinations fail with a message.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "test_run.h"

static const char *SCHEMA =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"enum\": [\"read_file\", \"write_file\", \"run_tests\"]},"
    "\"path\": {\"type\": \"string\", \"maxLength\": 24},"
    "\"line\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 500},"
    "\"force\": {\"type\": \"boolean\"}},"
    "\"required\": [\"name\", \"path\", \"line\"], \"additionalProperties\": false}";

static char tmpdir[64];

static char *write_tmp(const char *name, const char *text) {
    static char path[4][128];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return p;
}

/* The run's JSON object (the line that starts with {"prompt_ids"). */
static json_t *run_json(char *const *argv, int *rc) {
    char *out = NULL;
    *rc = run(argv, &out);
    const char *j = strstr(out, "{\"prompt_ids\"");
    json_t *v = j ? json_loads(j, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (!v) printf("no JSON in: %.400s\n", out);
    free(out);
    return v;
}

/* Independent of the grammar engine: the schema above, by hand. */
static bool valid_instance(const char *text) {
    json_error_t err;
    json_t *v = json_loads(text, 0, &err);
    if (!json_is_object(v)) {
        json_decref(v);
        return false;
    }
    bool ok = true;
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        if (!strcmp(key, "name")) {
            const char *s = json_string_value(val);
            ok &= s && (!strcmp(s, "read_file") || !strcmp(s, "write_file") || !strcmp(s, "run_tests"));
        } else if (!strcmp(key, "path")) {
            ok &= json_is_string(val) && json_string_length(val) <= 24; /* bytes >= code points */
        } else if (!strcmp(key, "line")) {
            ok &= json_is_integer(val) && json_integer_value(val) >= 1 && json_integer_value(val) <= 500;
        } else if (!strcmp(key, "force")) {
            ok &= json_is_boolean(val);
        } else {
            ok = false;
        }
    }
    ok &= json_object_get(v, "name") && json_object_get(v, "path") && json_object_get(v, "line");
    json_decref(v);
    return ok;
}

static void schema_runs(const char *model, const char *schema_path, int n_seeds, const char *n_gen) {
    int finished = 0;
    for (int seed = 1; seed <= n_seeds; seed++) {
        char s[16];
        snprintf(s, sizeof s, "%d", seed * 7 + 1);
        int rc_on, rc_off;
        char *argv_on[] = {(char *)deja_bin, "run", "-m", (char *)model, "-p", "{\"name\": \"read_file\"} {", "-n",
                           (char *)n_gen, "--temp", "1.0", "--seed", s, "--json-schema", (char *)schema_path, "--json",
                           NULL};
        json_t *on = run_json(argv_on, &rc_on);
        setenv("LLAMA_OPT_SCHEMA_SKIP_ENABLED", "0", 1);
        json_t *off = run_json(argv_on, &rc_off);
        unsetenv("LLAMA_OPT_SCHEMA_SKIP_ENABLED");
        CHECKF(rc_on == 0 && rc_off == 0 && on && off, "%s seed %s: rc %d/%d", model, s, rc_on, rc_off);
        if (!on || !off) {
            json_decref(on);
            json_decref(off);
            continue;
        }
        const char *text = json_string_value(json_object_get(on, "text"));
        const char *fin = json_string_value(json_object_get(on, "finish_reason"));
        CHECKF(json_equal(json_object_get(on, "ids"), json_object_get(off, "ids")), "%s seed %s: ids differ", model, s);
        CHECK(json_is_integer(json_object_get(on, "n_forward_passes")));
        const json_int_t tot = json_integer_value(json_object_get(on, "schema_tokens_total"));
        const json_int_t sk = json_integer_value(json_object_get(on, "schema_tokens_skipped"));
        const json_int_t inf = json_integer_value(json_object_get(on, "schema_tokens_inferred"));
        CHECKF(tot == json_integer_value(json_object_get(on, "n_gen")) && sk + inf > 0, "%s seed %s: counters %lld %lld %lld",
               model, s, (long long)tot, (long long)sk, (long long)inf);
        CHECK(json_integer_value(json_object_get(off, "schema_tokens_skipped")) == 0);
        CHECKF(json_integer_value(json_object_get(on, "n_forward_passes")) <
                   json_integer_value(json_object_get(off, "n_forward_passes")),
               "%s seed %s: skipping saved no pass", model, s);
        if (fin && !strcmp(fin, "stop")) {
            finished++;
            CHECKF(valid_instance(text), "%s seed %s: output does not validate: %s", model, s, text);
            CHECK(json_is_true(json_object_get(on, "grammar_complete")));
        }
        json_decref(on);
        json_decref(off);
    }
    /* the schema bounds the output: most runs end before the cap */
    CHECKF(finished * 2 >= n_seeds, "%s: only %d of %d runs finished", model, finished, n_seeds);
    printf("%s: %d of %d runs finished, all valid\n", model, finished, n_seeds);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    deja_bin = argv[2];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deja-grammar-XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL);
    char codelm[512], stories[512];
    snprintf(codelm, sizeof codelm, "%s", test_shared_path(argv[1], "models/codelm-15m-f16.gguf"));
    snprintf(stories, sizeof stories, "%s", test_shared_path(argv[1], "models/stories260K.gguf"));
    const char *schema = write_tmp("schema.json", SCHEMA);
    schema_runs(codelm, schema, 8, "80");
    schema_runs(stories, schema, 5, "120");

    /* tools, required: one <tool_call> whose name is a tool and whose arguments follow its schema */
    const char *tools = write_tmp(
        "tools.json",
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_user_details\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"user_id\": {\"type\": \"string\", \"maxLength\": 20}}, \"required\": [\"user_id\"], "
        "\"additionalProperties\": false}}}, {\"type\": \"function\", \"function\": {\"name\": \"cancel\", \"parameters\": "
        "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}}, \"required\": [\"id\"], "
        "\"additionalProperties\": false}}}]");
    for (int seed = 1; seed <= 4; seed++) {
        char s[16];
        snprintf(s, sizeof s, "%d", seed);
        int rc;
        char *av[] = {(char *)deja_bin, "run", "-m", codelm, "-p",
                      "<|im_start|>user\nCancel reservation 42.<|im_end|>\n<|im_start|>assistant\n", "-n", "80",
                      "--temp", "0.8", "--seed", s, "--tools", (char *)tools, "--tool-choice", "required", "--json",
                      NULL};
        json_t *v = run_json(av, &rc);
        CHECKF(rc == 0 && v, "tools seed %s: rc %d", s, rc);
        if (!v) continue;
        const char *text = json_string_value(json_object_get(v, "text"));
        const char *fin = json_string_value(json_object_get(v, "finish_reason"));
        CHECKF(text && !strncmp(text, "<tool_call>\n{\"name\": \"", 22), "tools seed %s: %s", s, text);
        if (text && fin && !strcmp(fin, "stop")) {
            const char *b = strchr(text, '{'), *e = strstr(text, "}\n</tool_call>");
            CHECKF(b && e && !strcmp(e, "}\n</tool_call>"), "tools seed %s: %s", s, text);
            if (b && e) {
                json_t *call = json_loadb(b, (size_t)(e - b + 1), 0, NULL);
                const char *name = json_string_value(json_object_get(call, "name"));
                json_t *args = json_object_get(call, "arguments");
                CHECKF(call && name && json_is_object(args), "tools seed %s: %s", s, text);
                if (name && !strcmp(name, "cancel"))
                    CHECK(json_object_size(args) == 1 && json_is_integer(json_object_get(args, "id")));
                else if (name)
                    CHECK(!strcmp(name, "get_user_details") && json_object_size(args) == 1 &&
                          json_is_string(json_object_get(args, "user_id")));
                json_decref(call);
            }
        }
        json_decref(v);
    }

    /* errors: a message naming what and where, non-zero status */
    char *out = NULL;
    const char *bad_g = write_tmp("bad.gbnf", "root ::= \"a\" | b\n");
    CHECK(RUN(&out, "run", "-m", stories, "-p", "x", "--grammar", (char *)bad_g) == 1 && strstr(out, "undefined rule 'b'") &&
          strstr(out, "bad.gbnf"));
    free(out);
    const char *bad_s = write_tmp("bad.json", "{\"type\": \"object\", \"patternProperties\": {}}");
    CHECKF(RUN(&out, "run", "-m", stories, "-p", "x", "--json-schema", (char *)bad_s) == 1 &&
               strstr(out, "unsupported keyword 'patternProperties'"),
           "%s", out);
    free(out);
    CHECK(RUN(&out, "run", "-m", stories, "-p", "x", "--json-schema", (char *)schema, "--grammar", (char *)bad_g) == 1 &&
          strstr(out, "at most one"));
    free(out);
    CHECK(RUN(&out, "run", "-m", stories, "-p", "x", "--tool-choice", "required") == 1 && strstr(out, "need --tools"));
    free(out);
    CHECK(RUN(&out, "run", "-m", stories, "-p", "x", "--tools", (char *)schema) == 1 && strstr(out, "tools"));
    free(out);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    CHECK(system(cmd) == 0);
    TEST_END();
}
