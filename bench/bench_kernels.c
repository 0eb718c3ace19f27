/*
 * bench_kernels.c — single-thread throughput of the matrix-product kernels,
 * per weight type and per kernel table (ISA), in one run so that the ratios
 * are comparable on a noisy shared machine.
 *
 *   bench_kernels [--rows N] [--k K] [--tok T] [--types q4_0,q8_0,...] [--isa generic,avx2,avx512]
 *                 [--sec S] [--hot] [--small 2,4,8,16]
 *
 * Decode (GEMV, n_tok = 1): the weights are cycled through copies totalling
 * >= 256 MiB, so they come from DRAM as in a real decode step; reported as
 * weight GB/s, Gweights/s, GFLOP/s (2 per weight) and the fraction of the
 * single-thread read bandwidth measured at start-up.
 * Prefill (GEMM, n_tok = --tok, default 512): one matrix (from cache as
 * much as it fits), reported as GFLOP/s and tokens/s through this matrix.
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

static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static float frnd(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 - 0.5); }

/* Random weights: quantize random floats for a first block row, then fill the
 * rest with copies shifted by random bytes (fast; speed does not depend on values). */
static void fill_weights(uint32_t type, uint8_t *w, size_t row_bytes, int64_t n_rows, int64_t k) {
    float *x = malloc(sizeof(float) * (size_t)k);
    for (int64_t r = 0; r < 8 && r < n_rows; r++) {
        for (int64_t i = 0; i < k; i++) x[i] = frnd();
        dj_ref_quantize_row(type, x, w + (size_t)r * row_bytes, k);
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
    int64_t n_rows = 2048, k = 8192, n_tok = 512;
    double sec = 1.0;
    int hot = 0; /* --hot: decode from one copy of the weights (cache-resident if it fits) */
    int64_t small[8];
    int n_small = 0;
    const char *types_arg = "f32,f16,bf16,q8_0,q4_0,q4_K,q6_K", *isa_arg = "generic,avx2,avx512";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) n_rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--k") && i + 1 < argc) k = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--tok") && i + 1 < argc) n_tok = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types_arg = argv[++i];
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) isa_arg = argv[++i];
        else if (!strcmp(argv[i], "--sec") && i + 1 < argc) sec = atof(argv[++i]);
        else if (!strcmp(argv[i], "--hot")) hot = 1;
        else if (!strcmp(argv[i], "--small") && i + 1 < argc) {
            for (char *save = NULL, *t = strtok_r(argv[++i], ",", &save); t && n_small < 8; t = strtok_r(NULL, ",", &save))
                if (atoll(t) >= 1) small[n_small++] = atoll(t);
        } else {
            fprintf(stderr, "usage: %s [--rows N] [--k K] [--tok T] [--types a,b] [--isa generic,avx2,avx512] [--sec S] [--hot] [--small 2,4,8]\n", argv[0]);
            return 2;
        }
    }
    const double bw = read_bandwidth();
    printf("matrix %lld x %lld (rows x k), 1 thread; decode weights cycled through >= 256 MiB\n",
           (long long)n_rows, (long long)k);
    printf("single-thread read bandwidth (xor-sum of 512 MiB, best of 3): %.1f GB/s\n\n", bw);
    printf("%-12s %-5s | %-43s | %s\n", "isa", "type", "GEMV (decode, n_tok=1)", "GEMM (prefill)");
    printf("%-12s %-5s | %8s %7s %7s %7s %5s | %8s %8s %8s %6s\n", "", "", "ms", "GB/s", "Gw/s", "GFLOP/s",
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
    char tbuf[256];
    snprintf(tbuf, sizeof tbuf, "%s", types_arg);
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
        const size_t arb = dj_kernels_act_row_bytes(at, k);
        uint8_t *a = malloc(arb * (size_t)max_tok);
        double gemm_generic = 0;
        char ibuf[64];
        snprintf(ibuf, sizeof ibuf, "%s", isa_arg);
        for (char *s2 = NULL, *in = strtok_r(ibuf, ",", &s2); in; in = strtok_r(NULL, ",", &s2)) {
            enum dj_isa isa = DJ_ISA_COUNT;
            for (int i = 0; i < DJ_ISA_COUNT; i++)
                if (!strcmp(in, dj_isa_name((enum dj_isa)i))) isa = (enum dj_isa)i;
            const struct dj_kernels *kt = isa < DJ_ISA_COUNT ? dj_kernels_for_isa(isa) : NULL;
            if (!kt) continue;
            for (int64_t t = 0; t < max_tok; t++) kt->quantize_act[at](x + t * k, a + (size_t)t * arb, k);
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

            /* GEMM: as many rows as fit ~sec/3 per call at a first estimate */
            int64_t rows = n_rows;
            {
                const double t2 = now();
                mm(k, w_, wrb, a, arb, c, n_rows, 0, rows < 16 ? rows : 16, n_tok);
                const double per_row = (now() - t2) / 16;
                while (rows > 16 && per_row * (double)rows > sec / 3) rows /= 2;
            }
            int greps = 0;
            const double t3 = now();
            double t4;
            do {
                mm(k, w_, wrb, a, arb, c, n_rows, 0, rows, n_tok);
                greps++;
                t4 = now();
            } while (t4 - t3 < sec && greps < 1000);
            const double gemm = (t4 - t3) / greps * (double)n_rows / (double)rows; /* whole matrix */
            if (isa == DJ_ISA_GENERIC && !pk) gemm_generic = gemm;
            const double flop = 2.0 * (double)n_rows * (double)k;
            char ratio[16] = "-";
            if (gemm_generic > 0) snprintf(ratio, sizeof ratio, "%.1f", gemm_generic / gemm);
            printf("%-12s %-5s | %8.3f %7.2f %7.2f %7.2f %4.0f%% | %8lld %8.1f %8.1f %6s\n", name, tn, gemv * 1e3,
                   (double)wbytes / gemv / 1e9, (double)n_rows * (double)k / gemv / 1e9, flop / gemv / 1e9,
                   100.0 * (double)wbytes / gemv / 1e9 / bw, (long long)n_tok, flop * (double)n_tok / gemm / 1e9,
                   (double)n_tok / gemm, ratio);
            for (int i = 0; i < n_small; i++) {
                const double ts = time_cycled(mm, k, w_, wbytes, wrb, n_copies, a, arb, c, n_rows, small[i], sec);
                printf("%-12s %-5s |   small batch %2lld: %8.3f ms %7.2f GB/s %7.2f Gw/s x M (%.2f x decode)\n", name,
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
