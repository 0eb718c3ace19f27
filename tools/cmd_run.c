/*
 * cmd_run.c — `deja run`: tokenize a prompt, prefill it, generate N tokens.
 *
 * Output: the generated text on stdout (streamed), a prefill/decode speed line
 * on stderr; with --json one object (DESIGN.md §5) with prompt_ids, ids, text,
 * n_prompt, n_gen, t_prefill_ms, t_decode_ms and logits_hash — FNV-1a 64 over
 * the raw float32 bits of every logits vector the run produced, in order
 * (row 0 = logits at the last prompt position, row s = after feeding generated
 * token s-1).  --dump-logits writes those rows as float32 little-endian.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/hash.h"
#include "core/status.h"
#include "core/timer.h"
#include "model/context.h"
#include "sample/sampler.h"

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: deja run -m MODEL (-p TEXT | -f FILE) [options]\n"
            "  -n N              tokens to generate (default 64)\n"
            "  -c N              context size (default: the model's training context)\n"
            "  -t N              threads (default 1)\n"
            "  --ubatch N        tokens per forward step during prefill (default 512)\n"
            "  --temp T          temperature; 0 = greedy (default 0)\n"
            "  --top-k K         (default 40)   --top-p P (default 0.95)   --min-p P (default 0.05)\n"
            "  --repeat-penalty R  --freq-penalty F  --presence-penalty P  --penalty-last-n N\n"
            "  --seed S          sampler seed (default 0)\n"
            "  --ignore-eos      keep generating after an end-of-generation token\n"
            "  --json            print one JSON object instead of the text\n"
            "  --dump-logits F   write every logits vector as float32 LE rows to F\n"
            "  An empty prompt (-p \"\") means BOS only.  Special tokens in the prompt are parsed.\n");
}

static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch == '\r') fputs("\\r", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static bool parse_num(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_error(cmd, "%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *file = NULL, *dump = NULL;
    double n_gen = 64, n_ctx = 0, n_threads = 1, ubatch = 512, seed = 0;
    bool json = false, ignore_eos = false;
    struct dj_sampler_params sp = sampler_default_params();
    sp.temp = 0.0f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
#define NUM(name, lo, hi, dst)                                                            \
    else if (!strcmp(a, name)) {                                                          \
        const char *s = cli_value("run", argc, argv, &i);                                 \
        if (!s || !parse_num("run", name, s, lo, hi, &v)) return 1;                       \
        dst = v;                                                                          \
    }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            run_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model_path = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--dump-logits")) {
            if (!(dump = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = true;
        }
        NUM("-n", 0, 1e7, n_gen)
        NUM("-c", 1, 1e7, n_ctx)
        NUM("-t", 1, 1024, n_threads)
        NUM("--ubatch", 1, 1e6, ubatch)
        NUM("--temp", 0, 100, sp.temp)
        NUM("--top-k", 0, 1e9, sp.top_k)
        NUM("--top-p", 0, 1, sp.top_p)
        NUM("--min-p", 0, 1, sp.min_p)
        NUM("--repeat-penalty", 0, 100, sp.repeat_penalty)
        NUM("--freq-penalty", -100, 100, sp.freq_penalty)
        NUM("--presence-penalty", -100, 100, sp.presence_penalty)
        NUM("--penalty-last-n", 0, 1e6, sp.penalty_last_n)
        NUM("--seed", 0, 1.8e19, seed)
        else {
            run_usage(stderr);
            return cli_error("run", "unknown argument '%s'", a);
        }
#undef NUM
    }
    sp.seed = (uint64_t)seed;
    if (!model_path) {
        run_usage(stderr);
        return cli_error("run", "no model given (-m MODEL)");
    }
    if (!!prompt == !!file) {
        run_usage(stderr);
        return cli_error("run", "give exactly one of -p TEXT or -f FILE");
    }
    size_t plen = 0;
    char *owned = NULL;
    if (file) {
        if (!(owned = cli_read_file("run", file, &plen))) return 1;
        prompt = owned;
    } else {
        plen = strlen(prompt);
    }

    int rc = 1;
    struct dj_model *m = NULL;
    struct dj_context *c = NULL;
    struct dj_sampler *smp = NULL;
    struct dj_detok *dt = NULL;
    dj_token *pids = NULL, *ids = NULL;
    float *logits = NULL;
    FILE *df = NULL;
    char *text = NULL;
    size_t np = 0, n_ids = 0, text_len = 0, text_cap = 0;

    if (model_load(model_path, &m) != DJ_OK) {
        cli_error("run", "%s", dj_last_error());
        goto done;
    }
    if (vocab_tokenize(m->vocab, prompt, plen, true, true, &pids, &np) != DJ_OK) {
        cli_error("run", "%s", dj_last_error());
        goto done;
    }
    if (np == 0) {
        cli_error("run", "the prompt is empty and the model adds no BOS token");
        goto done;
    }
    struct dj_ctx_params cp = ctx_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_threads = (int)n_threads;
    cp.n_ubatch = (uint32_t)ubatch;
    if (cp.n_ctx > m->hp.n_ctx_train)
        dj_log(DJ_LOG_WARN, "context size %u exceeds the model's training context %u", cp.n_ctx, m->hp.n_ctx_train);
    if (cp.n_ctx == 0) cp.n_ctx = m->hp.n_ctx_train;
    if (np + (size_t)n_gen > cp.n_ctx) {
        cli_error("run", "prompt (%zu tokens) + %zu generated tokens exceed the context size %u (use -c)", np,
                  (size_t)n_gen, cp.n_ctx);
        goto done;
    }
    if (ctx_create(m, cp, &c) != DJ_OK) {
        cli_error("run", "%s", dj_last_error());
        goto done;
    }
    const size_t V = m->hp.n_vocab;
    smp = sampler_create(sp, V);
    dt = detok_create(m->vocab, false);
    logits = malloc(V * sizeof(float));
    ids = malloc(((size_t)n_gen + 1) * sizeof *ids);
    if (!smp || !dt || !logits || !ids) {
        cli_error("run", "out of memory");
        goto done;
    }
    if (dump && !(df = fopen(dump, "wb"))) {
        cli_error("run", "%s: cannot open for writing: %s", dump, strerror(errno));
        goto done;
    }
    for (size_t i = 0; i < np; i++) sampler_accept(smp, pids[i]);

    uint64_t lhash = DJ_FNV_OFFSET;
    int64_t t0 = dj_time_us();
    if (ctx_decode(c, pids, np, logits, false) != DJ_OK) {
        cli_error("run", "%s", dj_last_error());
        goto done;
    }
    int64_t t1 = dj_time_us();
    for (size_t s = 0; s < (size_t)n_gen; s++) {
        if (s > 0 && ctx_decode(c, &ids[s - 1], 1, logits, false) != DJ_OK) {
            cli_error("run", "%s", dj_last_error());
            goto done;
        }
        lhash = dj_fnv1a(lhash, logits, V * sizeof(float)); /* x86-64: float bits are little-endian */
        if (df && fwrite(logits, sizeof(float), V, df) != V) {
            cli_error("run", "%s: write failed: %s", dump, strerror(errno));
            goto done;
        }
        dj_token tok = sampler_sample(smp, logits);
        sampler_accept(smp, tok);
        ids[n_ids++] = tok;
        size_t pl;
        const char *piece = detok_push(dt, tok, &pl);
        if (text_len + pl + 1 > text_cap) {
            text_cap = (text_len + pl + 1) * 2;
            char *nt = realloc(text, text_cap);
            if (!nt) {
                cli_error("run", "out of memory");
                goto done;
            }
            text = nt;
        }
        memcpy(text + text_len, piece, pl);
        text_len += pl;
        if (!json) {
            fwrite(piece, 1, pl, stdout);
            fflush(stdout);
        }
        if (!ignore_eos && vocab_is_eog(m->vocab, tok)) break;
    }
    size_t pl;
    const char *tail = detok_flush(dt, &pl);
    if (pl) {
        char *nt = realloc(text, text_len + pl + 1);
        if (!nt) {
            cli_error("run", "out of memory");
            goto done;
        }
        text = nt;
        memcpy(text + text_len, tail, pl);
        text_len += pl;
        if (!json) fwrite(tail, 1, pl, stdout);
    }
    int64_t t2 = dj_time_us();
    double ms_p = (double)(t1 - t0) / 1000.0, ms_d = (double)(t2 - t1) / 1000.0;
    fprintf(stderr, "\ndeja run: prefill %zu tokens in %.1f ms (%.1f t/s), decode %zu tokens in %.1f ms (%.1f t/s), %d threads\n",
            np, ms_p, ms_p > 0 ? (double)np * 1000.0 / ms_p : 0.0, n_ids, ms_d,
            ms_d > 0 && n_ids > 1 ? (double)(n_ids - 1) * 1000.0 / ms_d : 0.0, cp.n_threads);
    if (json) {
        printf("{\"prompt_ids\": [");
        for (size_t i = 0; i < np; i++) printf(i ? ", %d" : "%d", pids[i]);
        printf("], \"ids\": [");
        for (size_t i = 0; i < n_ids; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("], \"text\": ");
        json_str(stdout, text ? text : "", text_len);
        printf(", \"n_prompt\": %zu, \"n_gen\": %zu, \"t_prefill_ms\": %.3f, \"t_decode_ms\": %.3f, "
               "\"logits_hash\": \"%016" PRIx64 "\"}\n",
               np, n_ids, ms_p, ms_d, lhash);
    } else {
        putchar('\n');
    }
    rc = 0;
done:
    if (df && fclose(df) != 0 && rc == 0) rc = cli_error("run", "%s: write failed: %s", dump, strerror(errno));
    free(text);
    free(ids);
    free(logits);
    free(pids);
    detok_destroy(dt);
    sampler_free(smp);
    ctx_free(c);
    model_free(m);
    free(owned);
    return rc;
}
