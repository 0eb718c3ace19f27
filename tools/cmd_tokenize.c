/*
 * cmd_tokenize.c — `deja tokenize -m MODEL (-p TEXT | -f FILE)`: token ids,
 * space-separated, on one line (DESIGN.md §5).  --bench times the encoder on
 * the text (one thread) and prints MB/s instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "deja.h"
#include "tokenizer/tokenizer.h"

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: deja tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--parse-special] [--pieces] [--bench]\n"
            "  prints the token ids of the text, space-separated, on one line.\n"
            "  -m MODEL         a GGUF model or vocab-only file\n"
            "  -p TEXT          the text (\"\" is allowed)\n"
            "  -f FILE          read the text from FILE\n"
            "  --no-bos         do not add BOS/EOS even where the vocab asks for them\n"
            "  --parse-special  match control tokens written in the text (e.g. <|im_start|>)\n"
            "  --pieces         print one 'id<TAB>piece' line per token instead\n"
            "  --bench          time the encoder on the text (1 thread) and print MB/s\n");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Encodes the text repeatedly (at least 5 runs and 2 s) and reports the median. */
static int run_bench(const struct dj_vocab *v, const char *src, const char *text, size_t len, bool add_special,
                     bool parse_special) {
    enum { MAX_RUNS = 200 };
    double mbps[MAX_RUNS];
    int runs = 0;
    size_t n_tok = 0;
    int64_t t_total = 0;
    dj_token *ids = NULL;
    if (vocab_tokenize(v, text, len, add_special, parse_special, &ids, &n_tok) != DJ_OK) /* warm-up */
        return cli_error("tokenize", "%s", dj_last_error());
    free(ids);
    while (runs < MAX_RUNS && (runs < 5 || t_total < 2000000)) {
        int64_t t0 = dj_time_us();
        if (vocab_tokenize(v, text, len, add_special, parse_special, &ids, &n_tok) != DJ_OK)
            return cli_error("tokenize", "%s", dj_last_error());
        int64_t dt = dj_time_us() - t0;
        free(ids);
        t_total += dt;
        mbps[runs++] = dt > 0 ? (double)len / (double)dt : 0; /* bytes/us = MB/s */
    }
    qsort(mbps, (size_t)runs, sizeof mbps[0], cmp_double);
    printf("tokenize bench: %s: %zu bytes, %zu tokens (%.2f bytes/token), vocab %s/%s, 1 thread\n", src, len, n_tok,
           n_tok ? (double)len / (double)n_tok : 0.0, vocab_type_name(v), vocab_pre_name(v));
    printf("tokenize bench: median %.2f MB/s (min %.2f, max %.2f over %d runs), %.0f tokens/s\n", mbps[runs / 2],
           mbps[0], mbps[runs - 1], runs, mbps[runs / 2] * 1e6 / ((double)len / (double)(n_tok ? n_tok : 1)));
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool no_bos = false, parse_special = false, bench = false, pieces = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value("tokenize", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = cli_value("tokenize", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_value("tokenize", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = true;
        } else if (!strcmp(a, "--parse-special")) {
            parse_special = true;
        } else if (!strcmp(a, "--bench")) {
            bench = true;
        } else if (!strcmp(a, "--pieces")) {
            pieces = true;
        } else if (a[0] == '-' && !bench) {
            tokenize_usage(stderr);
            return cli_error("tokenize", "unknown option '%s'", a);
        } else if (bench && !file && a[0] != '-') {
            file = a; /* `deja tokenize -m M --bench FILE` */
        } else {
            tokenize_usage(stderr);
            return cli_error("tokenize", "unexpected argument '%s'", a);
        }
    }
    if (!model) {
        tokenize_usage(stderr);
        return cli_error("tokenize", "no model given (-m MODEL)");
    }
    if (!!prompt == !!file) {
        tokenize_usage(stderr);
        return cli_error("tokenize", "give exactly one of -p TEXT or -f FILE");
    }
    size_t len = 0;
    char *owned = NULL;
    const char *text = prompt;
    if (file) {
        if (!(owned = cli_read_file("tokenize", file, &len))) return 1;
        text = owned;
    } else {
        len = strlen(prompt);
    }
    struct dj_vocab *v = NULL;
    if (dj_vocab_load_file(model, &v) != DJ_OK) {
        free(owned);
        return cli_error("tokenize", "%s", dj_last_error());
    }
    int rc = 0;
    if (bench) {
        rc = run_bench(v, file ? file : "-p text", text, len, !no_bos, parse_special);
    } else {
        dj_token *ids = NULL;
        size_t n = 0;
        if (vocab_tokenize(v, text, len, !no_bos, parse_special, &ids, &n) != DJ_OK) {
            rc = cli_error("tokenize", "%s", dj_last_error());
        } else if (pieces) {
            char buf[256];
            for (size_t i = 0; i < n; i++) {
                size_t pl = vocab_token_to_piece(v, ids[i], true, buf, sizeof buf);
                printf("%d\t%.*s\n", ids[i], (int)(pl < sizeof buf ? pl : sizeof buf), buf);
            }
        } else {
            for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
            putchar('\n');
        }
        free(ids);
    }
    dj_vocab_free(v);
    free(owned);
    return rc;
}
