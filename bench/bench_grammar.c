/*
 * bench_grammar.c — µs per token of the grammar token mask (gtok_mask) along
 * real model outputs, one thread.
 *
 *   bench_grammar -m VOCAB.gguf -g GRAMMAR.gbnf [--ids F | --traces PATH [--match S]]
 *                 [--dump-ids F] [--max-seqs N] [--passes P]
 *
 * Sequences of token ids: from --ids F (one sequence a line, ids separated by
 * spaces), or extracted from agent traces (PATH: a .jsonl file or a folder of
 * them, default the shared folder's traces/; --match keeps the files whose name contains
 * S): every <tool_call>...</tool_call> body of each line's `response`,
 * trimmed of surrounding whitespace, tokenized with the vocabulary (no BOS).
 * --dump-ids writes the sequences used, so that another harness (llama.cpp's
 * sampler) times the very same ones.
 *
 * For each sequence, from a fresh matcher: before each token (and once after
 * the last, where the end-of-generation token must be allowed) gtok_mask is
 * timed, then the token is taken with gtok_accept.  A token the grammar
 * forbids (the recorded output is not in the grammar: invalid JSON, another
 * tool name) is reported and the rest of its sequence skipped.
 * Pass 1 starts from a fresh dj_gtok (cold caches, as a new grammar in a
 * server: contexts are computed on their first use); pass 2 repeats with the
 * caches it left (steady state).  The first mask of pass 1 (the cold start)
 * is reported alone and left out of pass 1's distribution.  Times are the
 * thread's CPU time (time descheduled on a shared machine is not ours).
 */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/status.h"
#include "deja.h"
#include "sample/grammar.h"
#include "sample/schema_skip.h"
#include "tokenizer/tokenizer.h"

#ifndef DJ_SHARED_DIR
#define DJ_SHARED_DIR "../shared"
#endif

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

struct seqs {
    dj_token **ids;
    size_t *n;
    size_t count, cap;
};

static void seqs_add(struct seqs *s, dj_token *ids, size_t n) {
    if (s->count == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->ids = realloc(s->ids, s->cap * sizeof *s->ids);
        s->n = realloc(s->n, s->cap * sizeof *s->n);
        if (!s->ids || !s->n) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    s->ids[s->count] = ids;
    s->n[s->count++] = n;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[n] = 0;
        if (len) *len = (size_t)n;
    }
    return p;
}

static void load_ids(const char *path, struct seqs *s) {
    char *text = read_all(path, NULL);
    if (!text) {
        fprintf(stderr, "%s: cannot read\n", path);
        exit(1);
    }
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        size_t cap = 64, n = 0;
        dj_token *ids = malloc(cap * sizeof *ids);
        for (char *p = line, *end; ids; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            if (n == cap) ids = realloc(ids, (cap *= 2) * sizeof *ids);
            if (ids) ids[n++] = (dj_token)v;
        }
        if (ids && n)
            seqs_add(s, ids, n);
        else
            free(ids);
    }
    free(text);
}

static size_t trace_file(const char *path, const struct dj_vocab *v, struct seqs *s, size_t max) {
    char *text = read_all(path, NULL);
    if (!text) return 0;
    size_t added = 0;
    for (char *line = strtok(text, "\n"); line && s->count < max; line = strtok(NULL, "\n")) {
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        const char *r = o ? json_string_value(json_object_get(o, "response")) : NULL;
        for (const char *p = r; p && (p = strstr(p, "<tool_call>")) && s->count < max;) {
            p += strlen("<tool_call>");
            const char *e = strstr(p, "</tool_call>");
            if (!e) break;
            const char *a = p, *b = e;
            while (a < b && (*a == ' ' || *a == '\n' || *a == '\t' || *a == '\r')) a++;
            while (b > a && (b[-1] == ' ' || b[-1] == '\n' || b[-1] == '\t' || b[-1] == '\r')) b--;
            dj_token *ids = NULL;
            size_t n = 0;
            if (b > a && vocab_tokenize(v, a, (size_t)(b - a), false, false, &ids, &n) == DJ_OK && n) {
                seqs_add(s, ids, n);
                added++;
            } else {
                free(ids);
            }
            p = e;
        }
        json_decref(o);
    }
    free(text);
    return added;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void load_traces(const char *path, const char *match, const struct dj_vocab *v, struct seqs *s, size_t max) {
    size_t len = strlen(path);
    if (len > 6 && !strcmp(path + len - 6, ".jsonl")) {
        trace_file(path, v, s, max);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "%s: cannot open\n", path);
        exit(1);
    }
    char **names = NULL;
    size_t nn = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 6, ".jsonl") || (match && !strstr(de->d_name, match))) continue;
        names = realloc(names, (nn + 1) * sizeof *names);
        names[nn++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, nn, sizeof *names, cmp_str); /* a stable order, whatever readdir gives */
    for (size_t i = 0; i < nn; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        trace_file(full, v, s, max);
        free(names[i]);
    }
    free(names);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median and p99 of t[0..n) (sorted in place) as a JSON object. */
static void json_stats(const char *key, double *t, size_t n) {
    qsort(t, n, sizeof *t, cmp_double);
    printf("\"%s\": {\"median\": %.3f, \"p99\": %.3f, \"max\": %.3f}", key, n ? t[n / 2] : 0.0,
           n ? t[(size_t)(0.99 * (double)(n - 1))] : 0.0, n ? t[n - 1] : 0.0);
}

static void report(const char *label, double *t, size_t n) {
    if (!n) {
        printf("%-28s no masks\n", label);
        return;
    }
    qsort(t, n, sizeof *t, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += t[i];
    printf("%-28s %7zu masks  median %7.2f  p90 %7.2f  p99 %8.2f  max %9.1f  mean %7.2f us\n", label, n, t[n / 2],
           t[(size_t)(0.9 * (double)(n - 1))], t[(size_t)(0.99 * (double)(n - 1))], t[n - 1], sum / (double)n);
}

int main(int argc, char **argv) {
    const char *model = NULL, *gpath = NULL, *ids_path = NULL, *traces = DJ_SHARED_DIR "/traces", *match = NULL,
               *dump = NULL;
    size_t max_seqs = SIZE_MAX;
    int passes = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && val) model = argv[++i];
        else if (!strcmp(a, "-g") && val) gpath = argv[++i];
        else if (!strcmp(a, "--ids") && val) ids_path = argv[++i];
        else if (!strcmp(a, "--traces") && val) traces = argv[++i];
        else if (!strcmp(a, "--match") && val) match = argv[++i];
        else if (!strcmp(a, "--dump-ids") && val) dump = argv[++i];
        else if (!strcmp(a, "--max-seqs") && val) max_seqs = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--passes") && val) passes = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: bench_grammar -m VOCAB.gguf -g GRAMMAR.gbnf [--ids F | --traces PATH [--match S]]\n"
                    "                     [--dump-ids F] [--max-seqs N] [--passes P]\n");
            return 2;
        }
    }
    if (!model || !gpath || passes < 1) {
        fprintf(stderr, "bench_grammar: -m and -g are required (see the header of bench/bench_grammar.c)\n");
        return 2;
    }
    struct dj_vocab *v = NULL;
    if (dj_vocab_load_file(model, &v) != DJ_OK) {
        fprintf(stderr, "%s: %s\n", model, dj_last_error());
        return 1;
    }
    size_t glen;
    char *gsrc = read_all(gpath, &glen);
    if (!gsrc) {
        fprintf(stderr, "%s: cannot read\n", gpath);
        return 1;
    }
    struct seqs s = {0};
    if (ids_path)
        load_ids(ids_path, &s);
    else
        load_traces(traces, match, v, &s, max_seqs);
    if (s.count > max_seqs) s.count = max_seqs;
    if (dump) {
        FILE *f = fopen(dump, "w");
        if (!f) {
            fprintf(stderr, "%s: cannot write\n", dump);
            return 1;
        }
        for (size_t i = 0; i < s.count; i++)
            for (size_t j = 0; j < s.n[i]; j++) fprintf(f, "%d%c", s.ids[i][j], j + 1 < s.n[i] ? ' ' : '\n');
        fclose(f);
    }
    size_t total = 0;
    for (size_t i = 0; i < s.count; i++) total += s.n[i];

    double t0 = now_us();
    struct dj_gvocab *gv = NULL;
    if (gvocab_create(v, &gv) != DJ_OK) {
        fprintf(stderr, "gvocab: %s\n", dj_last_error());
        return 1;
    }
    double t1 = now_us();
    struct dj_grammar *g = NULL;
    if (grammar_parse(gsrc, glen, NULL, v, &g) != DJ_OK) {
        fprintf(stderr, "%s: %s\n", gpath, dj_last_error());
        return 1;
    }
    struct dj_gtok *t = NULL;
    if (gtok_create(g, gv, &t) != DJ_OK) {
        fprintf(stderr, "gtok: %s\n", dj_last_error());
        return 1;
    }
    double t2 = now_us();
    printf("bench_grammar: %s (%zu tokens), %s, %zu sequences, %zu tokens\n", model, vocab_n_tokens(v), gpath, s.count,
           total);
    printf("gvocab_create %.1f ms; grammar_parse + gtok_create %.1f ms\n", (t1 - t0) / 1e3, (t2 - t1) / 1e3);

    size_t nw = (vocab_n_tokens(v) + 63) / 64;
    uint64_t *mask = malloc(nw * sizeof *mask);
    double *times = malloc((total + s.count + 1) * sizeof *times);
    double *computed = malloc((total + s.count + 1) * sizeof *computed);
    /* what a sampler pays: the mask applied to a logits vector (as sample/schema_skip.c does), and the accept */
    double *t_apply = malloc((total + s.count + 1) * sizeof *t_apply);
    double *t_accept = malloc((total + s.count + 1) * sizeof *t_accept);
    float *logits = calloc(vocab_n_tokens(v), sizeof *logits);
    if (!mask || !times || !computed || !t_apply || !t_accept || !logits) return 1;
    double cold = -1;
    for (int pass = 0; pass < passes; pass++) {
        size_t nt = 0, nc_t = 0, rejected = 0, n_allowed = 0, n_ap = 0, n_ac = 0;
        struct dj_gtok_stats before;
        gtok_get_stats(t, &before);
        for (size_t i = 0; i < s.count; i++) {
            struct dj_gmatch *m = NULL;
            if (gmatch_create(g, &m) != DJ_OK) return 1;
            for (size_t j = 0; j <= s.n[i]; j++) {
                struct dj_gtok_stats s0, s1;
                gtok_get_stats(t, &s0);
                double a = now_us();
                size_t cnt = gtok_mask(t, m, mask);
                double b = now_us();
                grammar_mask_apply(mask, logits, vocab_n_tokens(v));
                double c = now_us();
                t_apply[n_ap++] = c - a;
                gtok_get_stats(t, &s1);
                if (cold < 0) {
                    cold = b - a;
                } else {
                    times[nt++] = b - a;
                    if (s1.n_mask_cached == s0.n_mask_cached) computed[nc_t++] = b - a;
                }
                n_allowed += cnt;
                if (j == s.n[i]) {
                    dj_token eos = vocab_eos(v);
                    if (pass == 0 && eos >= 0 && !((mask[eos / 64] >> (eos % 64)) & 1))
                        printf("  sequence %zu: complete but the grammar cannot end there\n", i);
                    break;
                }
                dj_token tok = s.ids[i][j];
                bool bit = tok >= 0 && (size_t)tok < vocab_n_tokens(v) && ((mask[tok / 64] >> (tok % 64)) & 1);
                double a2 = now_us();
                bool ok = gtok_accept(t, m, tok);
                t_accept[n_ac++] = now_us() - a2;
                if (bit != ok) printf("  sequence %zu token %zu: mask says %d, gtok_accept %d (BUG)\n", i, j, bit, ok);
                if (!ok) {
                    if (pass == 0) {
                        char piece[64];
                        size_t l = vocab_token_to_piece(v, tok, false, piece, sizeof piece - 1);
                        piece[l < sizeof piece - 1 ? l : sizeof piece - 1] = 0;
                        printf("  sequence %zu: token %zu of %zu ('%s') is not in the grammar; rest skipped\n", i, j,
                               s.n[i], piece);
                    }
                    rejected++;
                    break;
                }
            }
            gmatch_free(m);
        }
        struct dj_gtok_stats st;
        gtok_get_stats(t, &st);
        char label[64];
        snprintf(label, sizeof label, "pass %d (%s)", pass + 1, pass == 0 ? "cold caches" : "warm caches");
        if (pass == 0) printf("cold first mask: %.1f ms\n", cold / 1e3);
        report(label, times, nt);
        report("  of which not in the LRU", computed, nc_t);
        uint64_t nm = st.n_mask - before.n_mask, nc = st.n_mask_cached - before.n_mask_cached;
        printf("%-28s whole-mask cache hits %.1f %%, context-dependent checks %llu, %zu sequences cut short, "
               "%.0f tokens allowed per mask on average\n",
               "", nm ? 100.0 * (double)nc / (double)nm : 0.0, (unsigned long long)(st.n_checked - before.n_checked),
               rejected, nm ? (double)n_allowed / (double)nm : 0.0);
        /* one JSON line per pass for bench/grammar.sh (the peer prints the same fields) */
        printf("{\"pass\": %d, \"n_tokens\": %zu, \"compile_ms\": %.3f, \"vocab_ms\": %.3f, \"first_mask_ms\": %.3f, ",
               pass + 1, nt, (t2 - t1) / 1e3, (t1 - t0) / 1e3, cold / 1e3);
        json_stats("mask_us", times, nt);
        printf(", ");
        json_stats("apply_us", t_apply, n_ap);
        printf(", ");
        json_stats("accept_us", t_accept, n_ac);
        printf("}\n");
    }
    free(logits);
    free(t_apply);
    free(t_accept);
    free(mask);
    free(times);
    free(computed);
    gtok_free(t);
    grammar_free(g);
    gvocab_free(gv);
    dj_vocab_free(v);
    for (size_t i = 0; i < s.count; i++) free(s.ids[i]);
    free(s.ids);
    free(s.n);
    free(gsrc);
    return 0;
}
