/*
 * kernels_peer.c — deja's matrix-product kernels against llama.cpp's CPU dot products
 * on the same weights, in one process and one thread, interleaved: the per-type ratio
 * that the noise of a shared machine does not swamp.
 *
 *   kernels_peer [--types q5_K,iq4_xs,...] [--k 2048] [--rows 5632] [--tok 64] [--sec 1.2]
 *                [--isa avx2|avx512|generic]
 *
 * Per type: rows x k weights made by llama.cpp's own quantizer (ggml_quantize_chunk; the
 * importance-matrix types get a flat matrix), 16 distinct rows repeated; activations from
 * one set of random floats, quantized by each side's own activation quantizer (deja's
 * q8_0/q8_K; ggml's vec_dot_type).
 *   GEMV: one token, all rows, the weights cycled through copies of >= 256 MiB (from
 *         DRAM, as in decode): deja's matmul vs ggml's vec_dot row by row (what
 *         ggml_compute_forward_mul_mat does for one token on x86 without a repacked
 *         layout).  Weight GB/s.
 *   GEMM: --tok tokens over 256 rows (cache-resident): deja's matmul vs vec_dot per
 *         (row, token) pair.  GFLOP/s (2 per weight and token).
 * Both sides alternate in 16 rounds of sec/16 each; the best round of each counts
 * (thread CPU time).  llama.cpp's own prefill may use other kernels for some types
 * (repacked Q4_0/Q4_K/IQ4_NL/MXFP4, llamafile's tinyBLAS for Q4_0/Q5_0/Q8_0/IQ4_NL),
 * so the GEMM ratio is against its vec_dot path, not necessarily its best one.
 */
#define _GNU_SOURCE /* clock_gettime, strtok_r, MAP_ANONYMOUS, madvise under -std=c11 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/kernels.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rs = 777;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static float frnd(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 - 0.5); }

int main(int argc, char **argv) {
    int64_t k = 2048, rows = 5632, ntg = 64;
    double sec = 1.2;
    const char *types = "q4_0,q4_K,q5_K", *isa_name = "avx2";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "--k") && i + 1 < argc) k = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--tok") && i + 1 < argc) ntg = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--sec") && i + 1 < argc) sec = atof(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) isa_name = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--types a,b] [--k K] [--rows N] [--tok T] [--sec S] [--isa avx2]\n", argv[0]);
            return 2;
        }
    }
    ggml_cpu_init();
    const struct dj_kernels *kt = NULL;
    for (int i = 0; i < DJ_ISA_COUNT; i++)
        if (!strcmp(isa_name, dj_isa_name((enum dj_isa)i))) kt = dj_kernels_for_isa((enum dj_isa)i);
    if (!kt || rows < 256) {
        fprintf(stderr, "kernels_peer: no '%s' table on this CPU (or fewer than 256 rows)\n", isa_name);
        return 1;
    }
    printf("%lld x %lld (rows x k), 1 thread, deja table %s; GEMM %lld tokens\n", (long long)rows, (long long)k,
           kt->name, (long long)ntg);
    printf("%-8s | %-27s | %s\n", "type", "GEMV GB/s: deja  llama  x", "GEMM GFLOP/s: deja  llama  x");
    char buf[512];
    snprintf(buf, sizeof buf, "%s", types);
    for (char *sv = NULL, *tn = strtok_r(buf, ",", &sv); tn; tn = strtok_r(NULL, ",", &sv)) {
        int T = -1;
        for (int t = 0; t < GGML_TYPE_COUNT; t++)
            if (ggml_type_name((enum ggml_type)t) && !strcmp(ggml_type_name((enum ggml_type)t), tn)) T = t;
        if (T < 0 || T >= DJ_TYPE_COUNT || !kt->w[T].matmul || k % ggml_blck_size((enum ggml_type)T)) {
            printf("%-8s | no kernel for this type and k\n", tn);
            continue;
        }
        const size_t ws = ggml_row_size((enum ggml_type)T, k), wbytes = ws * (size_t)rows;
        const int ncp = (int)(((size_t)256 << 20) / wbytes + 1);
        uint8_t *w = mmap(NULL, wbytes * (size_t)ncp, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (w == MAP_FAILED) return 1;
        madvise(w, wbytes * (size_t)ncp, MADV_HUGEPAGE);
        float *src = malloc(sizeof(float) * (size_t)k * 16), *im = malloc(sizeof(float) * (size_t)k);
        for (int64_t i = 0; i < k * 16; i++) src[i] = frnd();
        for (int64_t i = 0; i < k; i++) im[i] = 1;
        const int need_im = ggml_quantize_requires_imatrix((enum ggml_type)T) || T == GGML_TYPE_IQ1_M;
        ggml_quantize_chunk((enum ggml_type)T, src, w, 0, 16, k, need_im ? im : NULL);
        for (int64_t r = 16; r < rows; r++) memcpy(w + (size_t)r * ws, w + (size_t)(r % 16) * ws, ws);
        for (int c = 1; c < ncp; c++) memcpy(w + (size_t)c * wbytes, w, wbytes);
        float *x = malloc(sizeof(float) * (size_t)(k * ntg)), *c = malloc(sizeof(float) * (size_t)(rows * ntg));
        for (int64_t i = 0; i < k * ntg; i++) x[i] = frnd();
        const int at = kt->w[T].act_type;
        const size_t as = dj_kernels_act_row_bytes(at, k);
        uint8_t *a = malloc(as * (size_t)ntg);
        for (int64_t t = 0; t < ntg; t++) kt->quantize_act[at](x + t * k, a + (size_t)t * as, k);
        const struct ggml_type_traits_cpu *tc = ggml_get_type_traits_cpu((enum ggml_type)T);
        const enum ggml_type vt = tc->vec_dot_type;
        const size_t gas = ggml_row_size(vt, k);
        uint8_t *ga = malloc(gas * (size_t)ntg);
        for (int64_t t = 0; t < ntg; t++) ggml_get_type_traits_cpu(vt)->from_float(x + t * k, ga + (size_t)t * gas, k);
        double best[4] = {1e30, 1e30, 1e30, 1e30}; /* deja GEMV, llama GEMV, deja GEMM, llama GEMM */
        for (int round = 0; round < 16; round++)
            for (int m = 0; m < 4; m++) {
                const int64_t rr = m >= 2 ? 256 : rows, nt = m >= 2 ? ntg : 1;
                int reps = 0;
                const double t0 = now();
                double t1;
                do {
                    const uint8_t *wc = w + (m < 2 ? wbytes * (size_t)(reps % ncp) : 0);
                    if (m % 2 == 0) {
                        kt->w[T].matmul(k, wc, ws, a, as, c, rows, 0, rr, nt);
                    } else {
                        for (int64_t i = 0; i < rr; i++)
                            for (int64_t t = 0; t < nt; t++)
                                tc->vec_dot((int)k, c + t * rows + i, 0, wc + (size_t)i * ws, 0, ga + (size_t)t * gas, 0, 1);
                    }
                    reps++;
                    t1 = now();
                } while (t1 - t0 < sec / 16 || reps < 2);
                const double v = (t1 - t0) / reps * (double)rows / (double)rr; /* whole matrix */
                if (v < best[m]) best[m] = v;
            }
        const double fl = 2.0 * (double)rows * (double)k * (double)ntg;
        printf("%-8s | %6.2f %6.2f %5.2fx        | %6.1f %6.1f %5.2fx\n", tn, (double)wbytes / best[0] / 1e9,
               (double)wbytes / best[1] / 1e9, best[1] / best[0], fl / best[2] / 1e9, fl / best[3] / 1e9,
               best[3] / best[2]);
        fflush(stdout);
        munmap(w, wbytes * (size_t)ncp);
        free(src);
        free(im);
        free(x);
        free(c);
        free(a);
        free(ga);
    }
    return 0;
}
