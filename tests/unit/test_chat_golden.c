/*
 * test_chat_golden.c — the chat-template renderer against the golden renders
 * of ../shared/golden/chat_templates (Python's jinja2 as transformers'
 * apply_chat_template runs it; README.md there is the specification).
 *
 * For every expected/<template>.json and every case: the context is the
 * case's kwargs, then the conversation's messages, then
 * add_generation_prompt.  An `output` case must render byte for byte; an
 * `error` case must fail, and when the error is a TemplateError (the
 * template's own raise_exception) with exactly its message.
 *
 * Every case runs in-process through jinja_compile / jinja_render; a subset
 * (one case per template, rotating over the case kinds, plus every
 * TemplateError case) also runs through `deja template --template-file F
 * --case FILE --now 2026-01-15T10:00:00`, checking stdout byte for byte,
 * the exit status and the "deja template: MESSAGE" line on stderr.
 * On failure a per-template tally is printed.
 */
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chat/jinja.h"
#include "core/status.h"
#include "test.h"

#define NOW_2026_01_15_10_00 1768471200 /* 2026-01-15T10:00:00 UTC */

static const char *deja;
static char tmpdir[64];

struct tally {
    char name[128];
    int cases, failed, cli_cases, cli_failed;
};

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* kwargs, then messages, then add_generation_prompt (the order of the golden render). */
static json_t *make_context(const json_t *c, const json_t *messages) {
    json_t *ctx = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(c, "kwargs"), k, v) json_object_set(ctx, k, v);
    json_object_set(ctx, "messages", (json_t *)messages);
    json_object_set(ctx, "add_generation_prompt", json_object_get(c, "add_generation_prompt"));
    return ctx;
}

/* First differing byte, for the report. */
static size_t diff_at(const char *a, size_t na, const char *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* Runs argv with stdout and stderr into files; returns the exit status. */
static int run_cli(char *const *argv, const char *out_path, const char *err_path) {
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600), e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0) _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        close(o);
        close(e);
        execv(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static bool cli_case(const char *tmpl_path, const json_t *c, const json_t *messages, struct tally *t, const char *case_name) {
    char case_path[128], out_path[128], err_path[128];
    snprintf(case_path, sizeof case_path, "%s/case.json", tmpdir);
    snprintf(out_path, sizeof out_path, "%s/out.txt", tmpdir);
    snprintf(err_path, sizeof err_path, "%s/err.txt", tmpdir);
    json_t *cf = json_object();
    json_object_set(cf, "messages", (json_t *)messages);
    json_object_set(cf, "add_generation_prompt", json_object_get(c, "add_generation_prompt"));
    json_object_set(cf, "kwargs", json_object_get(c, "kwargs"));
    int dumped = json_dump_file(cf, case_path, JSON_COMPACT);
    json_decref(cf);
    if (dumped != 0) {
        fprintf(stderr, "  %s / %s: cannot write %s\n", t->name, case_name, case_path);
        return false;
    }
    char *argv[] = {(char *)deja, "template", "--template-file", (char *)tmpl_path, "--case", case_path, "--now",
                    "2026-01-15T10:00:00", NULL};
    int rc = run_cli(argv, out_path, err_path);
    size_t out_n = 0, err_n = 0;
    char *out = test_read_file(out_path, &out_n), *err = test_read_file(err_path, &err_n);
    bool ok;
    const json_t *expected = json_object_get(c, "output");
    const json_t *error = json_object_get(c, "error");
    if (expected) {
        ok = rc == 0 && out && out_n == json_string_length(expected) && !memcmp(out, json_string_value(expected), out_n);
    } else {
        ok = rc == 1 && out_n == 0;
        const char *type = json_string_value(json_object_get(error, "type"));
        if (ok && type && !strcmp(type, "TemplateError")) {
            char want[2048];
            snprintf(want, sizeof want, "deja template: %s\n", json_string_value(json_object_get(error, "message")));
            ok = err && !strcmp(err, want);
        }
    }
    if (!ok)
        fprintf(stderr, "  CLI %s / %s: exit %d, stderr: %.300s\n", t->name, case_name, rc, err ? err : "(none)");
    free(out);
    free(err);
    return ok;
}

static void run_template(const char *shared, const char *file, const json_t *convs, struct tally *t, size_t index) {
    char path[4096];
    snprintf(path, sizeof path, "%s/golden/chat_templates/expected/%s", shared, file);
    json_error_t jerr;
    json_t *e = json_load_file(path, 0, &jerr);
    snprintf(t->name, sizeof t->name, "%.*s", (int)(strlen(file) - 5), file);
    if (!e) {
        fprintf(stderr, "  %s: %s\n", path, jerr.text);
        t->failed++;
        return;
    }
    char tmpl_path[4096];
    snprintf(tmpl_path, sizeof tmpl_path, "%s/golden/chat_templates/templates/%s.jinja", shared, t->name);
    size_t src_n = 0;
    char *src = test_read_file(tmpl_path, &src_n);
    struct dj_jinja *tmpl = NULL;
    if (!src || jinja_compile(src, src_n, &tmpl) != DJ_OK) {
        fprintf(stderr, "  %s: does not compile: %s\n", t->name, src ? dj_last_error() : "cannot read");
        t->failed += (int)json_array_size(json_object_get(e, "cases"));
        t->cases += (int)json_array_size(json_object_get(e, "cases"));
        free(src);
        json_decref(e);
        return;
    }
    free(src);
    size_t i;
    json_t *c;
    const json_t *cases = json_object_get(e, "cases");
    json_array_foreach(cases, i, c) {
        const char *case_name = json_string_value(json_object_get(c, "case"));
        const char *conv = json_string_value(json_object_get(c, "conversation"));
        const json_t *messages = json_object_get(json_object_get(convs, conv), "messages");
        t->cases++;
        if (!messages) {
            fprintf(stderr, "  %s / %s: no conversation '%s'\n", t->name, case_name, conv);
            t->failed++;
            continue;
        }
        json_t *ctx = make_context(c, messages);
        struct dj_jinja_out out = {0};
        enum dj_status st = jinja_render(tmpl, ctx, NOW_2026_01_15_10_00, &out);
        json_decref(ctx);
        const json_t *expected = json_object_get(c, "output");
        const json_t *error = json_object_get(c, "error");
        bool ok;
        if (expected) {
            const char *want = json_string_value(expected);
            size_t want_n = json_string_length(expected);
            ok = st == DJ_OK && out.n == want_n && !memcmp(out.text, want, want_n);
            if (!ok && st == DJ_OK) {
                size_t at = diff_at(out.text, out.n, want, want_n);
                size_t from = at > 40 ? at - 40 : 0;
                fprintf(stderr, "  %s / %s: differs at byte %zu of %zu (got %zu)\n    want: %.80s\n    got:  %.80s\n",
                        t->name, case_name, at, want_n, out.n, want + from, out.text + from);
            } else if (!ok) {
                fprintf(stderr, "  %s / %s: failed: %s\n", t->name, case_name, dj_last_error());
            }
        } else {
            const char *type = json_string_value(json_object_get(error, "type"));
            const char *msg = json_string_value(json_object_get(error, "message"));
            bool raised = type && !strcmp(type, "TemplateError");
            ok = st != DJ_OK && jinja_last_error_raised() == raised;
            if (ok && raised) ok = !strcmp(dj_last_error(), msg);
            if (!ok)
                fprintf(stderr, "  %s / %s: want %s (%s), got %s: %s\n", t->name, case_name, type, msg,
                        st == DJ_OK ? "a render" : "an error", st == DJ_OK ? "" : dj_last_error());
        }
        jinja_out_free(&out);
        if (!ok) t->failed++;
        /* the CLI: one case per template (rotating) and every TemplateError case */
        const char *etype = error ? json_string_value(json_object_get(error, "type")) : NULL;
        if (i == index % json_array_size(cases) || (etype && !strcmp(etype, "TemplateError"))) {
            t->cli_cases++;
            if (!cli_case(tmpl_path, c, messages, t, case_name)) t->cli_failed++;
        }
    }
    jinja_free(tmpl);
    json_decref(e);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_chat_golden SHARED_DIR DEJA_BINARY\n");
        return 2;
    }
    const char *shared = argv[1];
    deja = argv[2];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dj_chat_golden_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    json_error_t jerr;
    json_t *conv = json_load_file(test_shared_path(shared, "golden/chat_templates/conversations.json"), 0, &jerr);
    CHECKF(conv != NULL, "conversations.json: %s", jerr.text);
    if (!conv) TEST_END();
    const json_t *convs = json_object_get(conv, "conversations");

    char dir[4096];
    snprintf(dir, sizeof dir, "%s/golden/chat_templates/expected", shared);
    DIR *d = opendir(dir);
    CHECKF(d != NULL, "%s: cannot open", dir);
    if (!d) TEST_END();
    char **files = NULL;
    size_t n_files = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
        files = realloc(files, (n_files + 1) * sizeof *files);
        files[n_files++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(files, n_files, sizeof *files, cmp_str);

    struct tally *tallies = calloc(n_files ? n_files : 1, sizeof *tallies);
    int total = 0, failed = 0, cli_total = 0, cli_failed = 0;
    for (size_t i = 0; i < n_files; i++) {
        run_template(shared, files[i], convs, &tallies[i], i);
        total += tallies[i].cases, failed += tallies[i].failed;
        cli_total += tallies[i].cli_cases, cli_failed += tallies[i].cli_failed;
    }
    printf("chat golden: %d/%d cases pass in-process over %zu templates; CLI: %d/%d\n", total - failed, total, n_files,
           cli_total - cli_failed, cli_total);
    if (failed || cli_failed) {
        printf("per template (failed / cases, CLI failed / CLI cases):\n");
        for (size_t i = 0; i < n_files; i++)
            if (tallies[i].failed || tallies[i].cli_failed)
                printf("  %-48s %3d / %3d   %d / %d\n", tallies[i].name, tallies[i].failed, tallies[i].cases,
                       tallies[i].cli_failed, tallies[i].cli_cases);
    }
    CHECKF(n_files == 50 && total == 779, "expected 50 templates and 779 cases, found %zu and %d", n_files, total);
    CHECKF(failed == 0, "%d of %d golden cases fail in-process", failed, total);
    CHECKF(cli_failed == 0, "%d of %d golden cases fail through deja template", cli_failed, cli_total);

    for (size_t i = 0; i < n_files; i++) free(files[i]);
    free(files);
    free(tallies);
    json_decref(conv);
    char p[128];
    snprintf(p, sizeof p, "%s/case.json", tmpdir), unlink(p);
    snprintf(p, sizeof p, "%s/out.txt", tmpdir), unlink(p);
    snprintf(p, sizeof p, "%s/err.txt", tmpdir), unlink(p);
    rmdir(tmpdir);
    TEST_END();
}
