/*
 * bench_kernels.c — single-thread throughput of the matrix-product kernels,
 * per weight type and per kernel table (ISA), in one run so that the ratios
 * are comparable on a noisy shared machine.
 *
 *   bench_kernels [--rows N] [--k K] [--tok T[,T2,..]] [--types q4_0,q8_0,...] [--isa generic,avx2,avx512,avx512bf16,amx]
 *                 [--sec S] [--hot] [--small 2,4,8,16]
 *
 * --types takes any weight type deja has kernels for (q5_K, iq4_xs, mxfp4 …); "all"
 * is every one of them.  A table without a kernel for the type (or with only the
 * reference path, when --isa names it) prints "no kernel".
 *
 * Decode (GEMV, n_tok = 1): the weights are cycled through copies totalling
 * >= 256 MiB, so they come from DRAM as in a real decode step; reported as
 * weight GB/s, Gweights/s, GFLOP/s (2 per weight) and the fraction of the
 * single-thread read bandwidth measured at start-up.
 * Prefill (GEMM, n_tok = --tok, default 512; several sizes: one line each after the
 * first): one matrix (from cache as much as it fits), reported as GFLOP/s and
 * tokens/s through this matrix.
 * Activation quantization is not included (it is O(k) per token, measured
 * separately on the last line).  --hot decodes from a single copy instead (in
 * cache if it fits: the kernel's compute speed without the memory system).
 * Weights are in huge pages (as the model's copies are at load).
 * A table that repacks the type (kernels.h: pack) gets a second line, "+pack":
 * the same measurements on the packed copies through matmul_packed.
 * --small M,...: also small batches from DRAM (n_tok = M, the weights cycled
 * as for decode: batched decode and draft verification), as weight GB/s and
 * token-rows/s (M x rows a second, in Gw/s x M).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_rng.h"
#include "core/fp16.h"
#include "core/ggml_type.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"

/* The thread's CPU time, not wall time: on a machine shared with other jobs, time
 * spent descheduled is not the kernel's (contention for caches and memory remains). */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float frnd(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 - 0.5); }

/* Where a block of a type without a deja quantizer keeps its f16 scales (byte offsets;
 * -1: none), for random_blocks; MXFP4's E8M0 byte and IQ1_M's scale nibbles are set
 * apart.  Only the speed is measured, so random values do; the scales are kept finite
 * and normal so that no float op meets a NaN, infinity or subnormal. */
static void random_blocks(uint32_t type, uint8_t *row, size_t row_bytes) {
    const size_t bs = dj_type_info(type)->bytes;
    int o1 = 0, o2 = -1;
    switch (type) {
    case DJ_TYPE_Q4_1: case DJ_TYPE_Q5_1: case DJ_TYPE_Q5_K: o2 = 2; break;
    case DJ_TYPE_Q2_K: o1 = 80; o2 = 82; break;
    case DJ_TYPE_Q3_K: o1 = 108; break;
    case DJ_TYPE_TQ1_0: o1 = 52; break;
    case DJ_TYPE_TQ2_0: o1 = 64; break;
    case DJ_TYPE_MXFP4: case DJ_TYPE_NVFP4: o1 = -1; break;
    default: break;
    }
    for (size_t i = 0; i < row_bytes; i++) row[i] = (uint8_t)rnd();
    for (size_t b = 0; b + bs <= row_bytes; b += bs) {
        uint8_t *p = row + b;
        const uint16_t h = dj_f32_to_fp16(ldexpf(1.0f + (float)(rnd() % 1024) / 1024, -6 - (int)(rnd() % 6)));
        if (type == DJ_TYPE_MXFP4) p[0] = (uint8_t)(120 + rnd() % 8);
        if (type == DJ_TYPE_NVFP4)
            for (int s = 0; s < 4; s++) p[s] = (uint8_t)(0x30 + rnd() % 16);
        if (type == DJ_TYPE_IQ1_M) /* the f16 scale in the top nibbles of the 4 scale words */
            for (int i = 0; i < 4; i++) p[48 + 2 * i + 1] = (uint8_t)((p[48 + 2 * i + 1] & 0x0f) | ((h >> 4 * i) & 0xf) << 4);
        if (o1 >= 0 && type != DJ_TYPE_IQ1_M) memcpy(p + o1, &h, 2);
        if (o2 >= 0) memcpy(p + o2, &h, 2);
    }
}

/* Random weights: quantize random floats for a first block row, then fill the
 * rest with copies shifted by random bytes (fast; speed does not depend on values).
 * Types deja cannot quantize get random blocks instead (random_blocks). */
static void fill_weights(uint32_t type, uint8_t *w, size_t row_bytes, int64_t n_rows, int64_t k) {
    float *x = malloc(sizeof(float) * (size_t)k);
    for (int64_t r = 0; r < 8 && r < n_rows; r++) {
        for (int64_t i = 0; i < k; i++) x[i] = frnd();
        if (!dj_ref_quantize_row(type, x, w + (size_t)r * row_bytes, k)) random_blocks(type, w + (size_t)r * row_bytes, row_bytes);
    }
    for (int64_t r = 8; r < n_rows; r++) memcpy(w + (size_t)r * row_bytes, w + (size_t)(r % 8) * row_bytes, row_bytes);
    free(x);
}

/* Weights live in huge pages, as the model's copies do (src/model/loader.c): 64-byte
 * aligned, from an anonymous mapping with MADV_HUGEPAGE asked. */
static uint8_t *alloc_weights(size_t n) {
    const size_t huge = (size_t)2 << 20;
    uint8_t *p = mmap(NULL, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "bench_kernels: cannot map %zu bytes\n", n);
        exit(1);
    }
    p = (uint8_t *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

/* Single-thread read bandwidth: xor-sum of 512 MiB, best of 3. */
static double read_bandwidth(void) {
    const size_t n = (size_t)512 << 20;
    uint64_t *buf = malloc(n);
    if (!buf) return 0;
    memset(buf, 1, n);
    double best = 0;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = now();
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i < n / 8; i += 4) {
            s0 ^= buf[i];
            s1 ^= buf[i + 1];
            s2 ^= buf[i + 2];
            s3 ^= buf[i + 3];
        }
        sink ^= s0 ^ s1 ^ s2 ^ s3;
        const double bw = (double)n / (now() - t0) / 1e9;
        if (bw > best) best = bw;
    }
    (void)sink;
    free(buf);
    return best;
}

/* Seconds a call of mm over the cycled copies with n_tok tokens. */
static double time_cycled(dj_matmul_fn mm, int64_t k, const uint8_t *w, size_t wbytes, size_t wrb, int n_copies,
                          const uint8_t *a, size_t arb, float *c, int64_t n_rows, int64_t n_tok, double sec) {
    int reps = 0;
    const double t0 = now();
    double t1;
    do {
        mm(k, w + wbytes * (size_t)(reps % n_copies), wrb, a, arb, c, n_rows, 0, n_rows, n_tok);
        reps++;
        t1 = now();
    } while (t1 - t0 < sec || reps < 3);
    return (t1 - t0) / reps;
}

int main(int argc, char **argv) {
    int64_t n_rows = 2048, k = 8192, n_tok = 512, toks[4] = {512};
    int n_toks = 1;
    double sec = 1.0;
    int hot = 0; /* --hot: decode from one copy of the weights (cache-resident if it fits) */
    int64_t small[8];
    int n_small = 0;
    const char *types_arg = "f32,f16,bf16,q8_0,q4_0,q4_K,q6_K", *isa_arg = "generic,avx2,avx512,avx512bf16,amx";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) n_rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--k") && i + 1 < argc) k = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--tok") && i + 1 < argc) {
            n_toks = 0;
            for (char *save = NULL, *t = strtok_r(argv[++i], ",", &save); t && n_toks < 4; t = strtok_r(NULL, ",", &save))
                if (atoll(t) >= 1) toks[n_toks++] = atoll(t);
            if (!n_toks) toks[n_toks++] = 512;
            n_tok = toks[0];
            for (int j = 1; j < n_toks; j++) n_tok = toks[j] > n_tok ? toks[j] : n_tok;
        }
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types_arg = argv[++i];
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) isa_arg = argv[++i];
        else if (!strcmp(argv[i], "--sec") && i + 1 < argc) sec = atof(argv[++i]);
        else if (!strcmp(argv[i], "--hot")) hot = 1;
        else if (!strcmp(argv[i], "--small") && i + 1 < argc) {
            for (char *save = NULL, *t = strtok_r(argv[++i], ",", &save); t && n_small < 8; t = strtok_r(NULL, ",", &save))
                if (atoll(t) >= 1) small[n_small++] = atoll(t);
        } else {
            fprintf(stderr, "usage: %s [--rows N] [--k K] [--tok T[,T2,..]] [--types a,b|all] [--isa generic,avx2,avx512,avx512bf16,amx] [--sec S] [--hot] [--small 2,4,8]\n", argv[0]);
            return 2;
        }
    }
    const double bw = read_bandwidth();
    printf("matrix %lld x %lld (rows x k), 1 thread; decode weights cycled through >= 256 MiB\n",
           (long long)n_rows, (long long)k);
    printf("single-thread read bandwidth (xor-sum of 512 MiB, best of 3): %.1f GB/s\n\n", bw);
    printf("%-12s %-7s | %-43s | %s\n", "isa", "type", "GEMV (decode, n_tok=1)", "GEMM (prefill)");
    printf("%-12s %-7s | %8s %7s %7s %7s %5s | %8s %8s %8s %6s\n", "", "", "ms", "GB/s", "Gw/s", "GFLOP/s",
           "%bw", "n_tok", "GFLOP/s", "tok/s", "x gen");

    float *x = malloc(sizeof(float) * (size_t)(k * n_tok));
    for (int64_t i = 0; i < k * n_tok; i++) x[i] = frnd();
    int64_t max_tok = n_tok;
    for (int i = 0; i < n_small; i++) max_tok = small[i] > max_tok ? small[i] : max_tok;
    float *c = malloc(sizeof(float) * (size_t)(max_tok * n_rows));
    if (max_tok > n_tok) {
        x = realloc(x, sizeof(float) * (size_t)(k * max_tok));
        for (int64_t i = 0; i < k * max_tok; i++) x[i] = frnd();
    }
    char tbuf[512];
    if (!strcmp(types_arg, "all")) { /* every weight type with a kernel in the default table */
        size_t n = 0;
        tbuf[0] = 0;
        for (uint32_t t = 0; t < DJ_TYPE_COUNT; t++)
            if (dj_kernels()->w[t].matmul && n + 16 < sizeof tbuf)
                n += (size_t)snprintf(tbuf + n, sizeof tbuf - n, "%s%s", n ? "," : "", dj_type_name(t));
    } else {
        snprintf(tbuf, sizeof tbuf, "%s", types_arg);
    }
    for (char *save = NULL, *tn = strtok_r(tbuf, ",", &save); tn; tn = strtok_r(NULL, ",", &save)) {
        const int wtype = dj_type_from_name(tn);
        const int at = wtype < 0 ? -1 : dj_kernels_act_type((uint32_t)wtype);
        size_t wrb;
        if (at < 0 || !dj_row_bytes((uint32_t)wtype, k, &wrb)) {
            fprintf(stderr, "%s: no kernel for this type and k\n", tn);
            continue;
        }
        const size_t wbytes = wrb * (size_t)n_rows;
        const int n_copies = hot ? 1 : (int)(((size_t)256 << 20) / wbytes + 1);
        uint8_t *w = alloc_weights(wbytes * (size_t)n_copies); /* never unmapped: a benchmark */
        fill_weights((uint32_t)wtype, w, wrb, n_rows, k);
        for (int cp = 1; cp < n_copies; cp++) memcpy(w + wbytes * (size_t)cp, w, wbytes);
        /* room for the widest pairing any table has for this type (BF16: f32 or bf16) */
        const size_t arb_at = dj_kernels_act_row_bytes(at, k), arb_f32 = dj_kernels_act_row_bytes(DJ_TYPE_F32, k);
        uint8_t *a = malloc((arb_at > arb_f32 ? arb_at : arb_f32) * (size_t)max_tok);
        double gemm_generic[4] = {0, 0, 0, 0};
        char ibuf[64];
        snprintf(ibuf, sizeof ibuf, "%s", isa_arg);
        for (char *s2 = NULL, *in = strtok_r(ibuf, ",", &s2); in; in = strtok_r(NULL, ",", &s2)) {
            enum dj_isa isa = DJ_ISA_COUNT;
            for (int i = 0; i < DJ_ISA_COUNT; i++)
                if (!strcmp(in, dj_isa_name((enum dj_isa)i))) isa = (enum dj_isa)i;
            const struct dj_kernels *kt = isa < DJ_ISA_COUNT ? dj_kernels_for_isa(isa) : NULL;
            if (!kt) continue;
            if (!kt->w[wtype].matmul) {
                printf("%-12s %-7s | no kernel\n", kt->name, tn);
                continue;
            }
            const int kat = kt->w[wtype].act_type; /* the table's pairing (avx512bf16: bf16 x bf16) */
            const size_t arb = dj_kernels_act_row_bytes(kat, k);
            for (int64_t t = 0; t < max_tok; t++) kt->quantize_act[kat](x + t * k, a + (size_t)t * arb, k);
          for (int pk = 0; pk < 2; pk++) {
            const uint8_t *w_ = w;
            uint8_t *packed = NULL;
            if (pk) { /* the table's packed copies (same bytes a copy) */
                if (!kt->w[wtype].pack) break;
                packed = alloc_weights(wbytes * (size_t)n_copies);
                kt->w[wtype].pack(k, w, wrb, n_rows, 0, (n_rows + 15) / 16, packed);
                for (int cp = 1; cp < n_copies; cp++) memcpy(packed + wbytes * (size_t)cp, packed, wbytes);
                w_ = packed;
            }
            const dj_matmul_fn mm = pk ? kt->w[wtype].matmul_packed : kt->w[wtype].matmul;
            char name[32];
            snprintf(name, sizeof name, "%s%s", kt->name, pk ? "+pack" : "");

            /* GEMV over the cycled copies */
            const double gemv = time_cycled(mm, k, w_, wbytes, wrb, n_copies, a, arb, c, n_rows, 1, sec);

            /* GEMM per batch size: as many rows as fit ~sec/3 per call at a first estimate */
            for (int ti = 0; ti < n_toks; ti++) {
                const int64_t nt = toks[ti];
                int64_t rows = n_rows;
                {
                    const double t2 = now();
                    mm(k, w_, wrb, a, arb, c, n_rows, 0, rows < 16 ? rows : 16, nt);
                    const double per_row = (now() - t2) / 16;
                    while (rows > 16 && per_row * (double)rows > sec / 3) rows /= 2;
                }
                int greps = 0;
                const double t3 = now();
                double t4;
                do {
                    mm(k, w_, wrb, a, arb, c, n_rows, 0, rows, nt);
                    greps++;
                    t4 = now();
                } while (t4 - t3 < sec && greps < 1000);
                const double gemm = (t4 - t3) / greps * (double)n_rows / (double)rows; /* whole matrix */
                if (isa == DJ_ISA_GENERIC && !pk) gemm_generic[ti] = gemm;
                const double flop = 2.0 * (double)n_rows * (double)k;
                char ratio[16] = "-";
                if (gemm_generic[ti] > 0) snprintf(ratio, sizeof ratio, "%.1f", gemm_generic[ti] / gemm);
                if (ti == 0)
                    printf("%-12s %-7s | %8.3f %7.2f %7.2f %7.2f %4.0f%% | %8lld %8.1f %8.1f %6s\n", name, tn,
                           gemv * 1e3, (double)wbytes / gemv / 1e9, (double)n_rows * (double)k / gemv / 1e9,
                           flop / gemv / 1e9, 100.0 * (double)wbytes / gemv / 1e9 / bw, (long long)nt,
                           flop * (double)nt / gemm / 1e9, (double)nt / gemm, ratio);
                else
                    printf("%-12s %-7s | %43s | %8lld %8.1f %8.1f %6s\n", name, tn, "", (long long)nt,
                           flop * (double)nt / gemm / 1e9, (double)nt / gemm, ratio);
                fflush(stdout);
            }
            for (int i = 0; i < n_small; i++) {
                const double ts = time_cycled(mm, k, w_, wbytes, wrb, n_copies, a, arb, c, n_rows, small[i], sec);
                printf("%-12s %-7s |   small batch %2lld: %8.3f ms %7.2f GB/s %7.2f Gw/s x M (%.2f x decode)\n", name,
                       tn, (long long)small[i], ts * 1e3, (double)wbytes / ts / 1e9,
                       (double)n_rows * (double)k * (double)small[i] / ts / 1e9, gemv * (double)small[i] / ts);
            }
            fflush(stdout);
          }
        }
        free(a);
    }
    /* activation quantization cost, default table */
    const struct dj_kernels *kt = dj_kernels();
    uint8_t *a = malloc(dj_kernels_act_row_bytes(DJ_TYPE_Q8_K, k) * 4);
    const int acts[3] = {DJ_TYPE_F16, DJ_TYPE_Q8_0, DJ_TYPE_Q8_K};
    printf("\nactivation quantization (%s), per row of %lld:", kt->name, (long long)k);
    for (int i = 0; i < 3; i++) {
        int reps = 0;
        const double t0 = now();
        do kt->quantize_act[acts[i]](x + (reps % n_tok) * k, a, k);
        while (++reps < 20000 && now() - t0 < 0.2);
        printf(" %s %.2f us", dj_type_name((uint32_t)acts[i]), (now() - t0) / reps * 1e6);
    }
    printf("\n");
    free(a);
    free(x);
    free(c);
    return 0;
}
