/*
 * cmd_grammar.c — `deja grammar`: makes a GBNF grammar from a JSON schema, a
 * tools array or a GBNF file, prints it (parsed and printed again by
 * grammar_to_gbnf, so what is shown is what the engine uses), or checks that
 * a text is a sentence of it.  Exit status: 0 printed / matches, 1 does not
 * match, 2 an error (with the message).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "sample/toolcall.h"

static void grammar_usage(FILE *f) {
    fprintf(f,
            "usage: deja grammar (--json-schema FILE | --gbnf FILE | --tools FILE [tool options])\n"
            "                    [--ws compact|spaced|flexible] [--strict] [--raw] [--check TEXT | --check-file F]\n"
            "  prints the grammar, or checks a text against it (exit 0 match, 1 no match, 2 error).\n"
            "  --json-schema FILE    a JSON schema: the grammar of the JSON values valid under it\n"
            "  --gbnf FILE           a GBNF grammar as it is\n"
            "  --tools FILE          an OpenAI tools array: the grammar of tool-call replies\n"
            "    --tool-choice C     auto (default: free text, then calls), required, none, or a function name\n"
            "    --tool-format F     hermes (default: <tool_call>\\n{...}\\n</tool_call>) or json\n"
            "    --no-parallel       exactly one call (default: one or more)\n"
            "    --lazy              the grammar for what follows the trigger (printed as a comment)\n"
            "  --ws MODE             JSON whitespace: compact (schemas' default), spaced (\", \" and \": \",\n"
            "                        the tools' default) or flexible (up to 20 of [ \\t\\n] between tokens)\n"
            "  --strict              additionalProperties is false where a schema leaves it out\n"
            "  --ignore-formats      unknown 'format' values are annotations, not errors\n"
            "  --raw                 print the converter's text, not the parsed grammar\n"
            "  --check TEXT          does TEXT match the grammar?\n"
            "  --check-file F        does the content of F match the grammar?\n");
}

static int fail2(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "deja grammar: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 2;
}

int cmd_grammar(int argc, char **argv) {
    const char *schema_file = NULL, *gbnf_file = NULL, *tools_file = NULL, *check = NULL, *check_file = NULL;
    const char *choice = "auto", *format = "hermes", *ws = NULL;
    bool strict = false, raw = false, lazy = false, parallel = true, ignore_formats = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            grammar_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json-schema")) slot = &schema_file;
        else if (!strcmp(a, "--gbnf")) slot = &gbnf_file;
        else if (!strcmp(a, "--tools")) slot = &tools_file;
        else if (!strcmp(a, "--tool-choice")) slot = &choice;
        else if (!strcmp(a, "--tool-format")) slot = &format;
        else if (!strcmp(a, "--ws")) slot = &ws;
        else if (!strcmp(a, "--check")) slot = &check;
        else if (!strcmp(a, "--check-file")) slot = &check_file;
        else if (!strcmp(a, "--strict")) strict = true;
        else if (!strcmp(a, "--raw")) raw = true;
        else if (!strcmp(a, "--lazy")) lazy = true;
        else if (!strcmp(a, "--no-parallel")) parallel = false;
        else if (!strcmp(a, "--ignore-formats")) ignore_formats = true;
        else {
            fprintf(stderr, "deja grammar: unknown option '%s'\n", a);
            grammar_usage(stderr);
            return 2;
        }
        if (slot && !(*slot = cli_value("grammar", argc, argv, &i))) return 2;
    }
    if (!!schema_file + !!gbnf_file + !!tools_file != 1) {
        fprintf(stderr, "deja grammar: give exactly one of --json-schema, --gbnf, --tools\n");
        grammar_usage(stderr);
        return 2;
    }
    if (check && check_file) return fail2("give --check or --check-file, not both%s%s", "", "");

    struct dj_json_schema_opts so = json_schema_default_opts();
    so.strict = strict, so.ignore_unknown_formats = ignore_formats;
    if (tools_file) so.whitespace = DJ_JSON_WS_SPACED;
    if (ws) {
        if (!strcmp(ws, "compact")) so.whitespace = DJ_JSON_WS_COMPACT;
        else if (!strcmp(ws, "spaced")) so.whitespace = DJ_JSON_WS_SPACED;
        else if (!strcmp(ws, "flexible")) so.whitespace = DJ_JSON_WS_FLEXIBLE;
        else return fail2("--ws must be compact, spaced or flexible, not '%s'%s", ws, "");
    }

    size_t len = 0;
    const char *path = schema_file ? schema_file : gbnf_file ? gbnf_file : tools_file;
    char *src = cli_read_file("grammar", path, &len);
    if (!src) return 2;
    char *gbnf = NULL, *trigger = NULL;
    enum dj_status st = DJ_OK;
    if (schema_file) {
        st = json_schema_to_gbnf(src, len, &so, &gbnf);
    } else if (tools_file) {
        struct dj_toolcall_opts to = toolcall_default_opts();
        to.schema = so;
        to.parallel = parallel;
        if (!strcmp(choice, "auto")) to.choice = DJ_TOOL_AUTO;
        else if (!strcmp(choice, "required")) to.choice = DJ_TOOL_REQUIRED;
        else if (!strcmp(choice, "none")) to.choice = DJ_TOOL_NONE;
        else to.choice = DJ_TOOL_NAMED, to.name = choice;
        if (!strcmp(format, "hermes")) to.format = DJ_TOOL_FORMAT_HERMES;
        else if (!strcmp(format, "json")) to.format = DJ_TOOL_FORMAT_JSON;
        else {
            free(src);
            return fail2("--tool-format must be hermes or json, not '%s'%s", format, "");
        }
        struct dj_toolcall_grammar g = {0};
        st = toolcall_grammar_build(src, len, &to, &g);
        if (!st && !g.gbnf) {
            free(src);
            printf("# tool_choice none: no grammar\n");
            return 0;
        }
        if (!st) {
            char **take = lazy ? &g.lazy_gbnf : &g.gbnf;
            gbnf = *take, *take = NULL;
            trigger = g.trigger, g.trigger = NULL;
        }
        toolcall_grammar_free(&g);
    } else {
        gbnf = src, src = NULL;
    }
    free(src);
    if (st) {
        fprintf(stderr, "deja grammar: %s: %s\n", path, dj_last_error());
        return 2;
    }
    if (raw && !check && !check_file) { /* as converted, even if the parser would refuse it */
        if (trigger && lazy) printf("# trigger: %s (the grammar starts after it)\n", trigger);
        fputs(gbnf, stdout);
        free(gbnf), free(trigger);
        return 0;
    }
    struct dj_grammar *g = NULL;
    if (grammar_parse(gbnf, strlen(gbnf), NULL, NULL, &g) != DJ_OK) {
        fprintf(stderr, "deja grammar: %s: %s\n", path, dj_last_error());
        free(gbnf), free(trigger);
        return 2;
    }
    int rc = 0;
    if (check || check_file) {
        size_t n = 0;
        char *text = check_file ? cli_read_file("grammar", check_file, &n) : NULL;
        if (check_file && !text) rc = 2;
        else {
            if (check) n = strlen(check);
            bool ok = grammar_match(g, check ? check : text, n);
            printf("%s\n", ok ? "match" : "no match");
            rc = ok ? 0 : 1;
        }
        free(text);
    } else {
        if (trigger && lazy) printf("# trigger: %s (the grammar starts after it)\n", trigger);
        char *out = grammar_to_gbnf(g);
        if (!out) {
            fprintf(stderr, "deja grammar: out of memory\n");
            rc = 2;
        } else {
            fputs(out, stdout);
        }
        free(out);
    }
    grammar_free(g);
    free(gbnf), free(trigger);
    return rc;
}
