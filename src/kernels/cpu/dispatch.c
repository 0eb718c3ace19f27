/*
 * dispatch.c — CPU feature detection and the choice of kernel table.
 *
 * All tables are built once (pthread_once) on first use: the generic one
 * always, the AVX2 one if the CPU and OS support AVX2+FMA+F16C (+BMI2), the
 * AVX-512 one if they also support AVX-512 F/BW/VL/DQ and VNNI with the ZMM
 * state enabled by the OS (XCR0), the avx512bf16 one if they also have
 * AVX512_BF16, the amx one if they also have AMX-TILE and AMX-BF16 and Linux
 * lets the process use the tile state (kernels_amx.c).  dj_kernels() returns the best of them,
 * capped by the DJ_ISA environment variable.  Tables are immutable
 * afterwards, so readers need no locking.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/status.h"
#include "kernels/cpu/cpu_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

static bool cpu_supports(enum dj_isa isa) {
    unsigned a, b, c, d;
    if (isa == DJ_ISA_GENERIC) return true;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
               f16c = c & (1u << 29);
    if (!(fma && osxsave && avx && f16c)) return false;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return false; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
    if (!(avx2 && bmi2)) return false;
    if (isa == DJ_ISA_AVX2) return true;
    const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31),
               vnni = c & (1u << 11);
    if (!(f && dq && bw && vl && vnni)) return false;
    if ((xcr0 & 0xe0) != 0xe0) return false; /* opmask, ZMM0-15 upper halves, ZMM16-31 */
    if (isa == DJ_ISA_AVX512) return true;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return a & (1u << 5); /* AVX512_BF16 */
}
#else
static bool cpu_supports(enum dj_isa isa) { return isa == DJ_ISA_GENERIC; }
#endif

static struct dj_kernels tables[DJ_ISA_COUNT];
static bool available[DJ_ISA_COUNT];
static enum dj_isa chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_tables(void) {
    dj_kernels_init_generic(&tables[DJ_ISA_GENERIC]);
    available[DJ_ISA_GENERIC] = true;
    if (cpu_supports(DJ_ISA_AVX2)) {
        tables[DJ_ISA_AVX2] = tables[DJ_ISA_GENERIC];
        available[DJ_ISA_AVX2] = dj_kernels_init_avx2(&tables[DJ_ISA_AVX2]);
    }
    if (available[DJ_ISA_AVX2] && cpu_supports(DJ_ISA_AVX512)) {
        tables[DJ_ISA_AVX512] = tables[DJ_ISA_AVX2];
        available[DJ_ISA_AVX512] = dj_kernels_init_avx512(&tables[DJ_ISA_AVX512]);
    }
    if (available[DJ_ISA_AVX512] && cpu_supports(DJ_ISA_AVX512BF16)) {
        tables[DJ_ISA_AVX512BF16] = tables[DJ_ISA_AVX512];
        available[DJ_ISA_AVX512BF16] = dj_kernels_init_avx512bf16(&tables[DJ_ISA_AVX512BF16]);
    }
    if (available[DJ_ISA_AVX512BF16]) { /* its own CPU, OS and permission checks */
        tables[DJ_ISA_AMX] = tables[DJ_ISA_AVX512BF16];
        available[DJ_ISA_AMX] = dj_kernels_init_amx(&tables[DJ_ISA_AMX]);
    }
    enum dj_isa best = DJ_ISA_GENERIC;
    for (int i = 0; i < DJ_ISA_COUNT; i++)
        if (available[i]) best = (enum dj_isa)i;
    chosen = best;
    const char *env = getenv("DJ_ISA");
    if (env && *env) {
        int want = -1;
        for (int i = 0; i < DJ_ISA_COUNT; i++)
            if (strcasecmp(env, dj_isa_name((enum dj_isa)i)) == 0) want = i;
        if (want < 0) {
            dj_log(DJ_LOG_WARN, "DJ_ISA=%s: unknown (generic, avx2, avx512, avx512bf16 or amx); using %s", env,
                   tables[best].name);
        } else if (!available[want]) {
            dj_log(DJ_LOG_WARN, "DJ_ISA=%s: not supported by this CPU; using %s", env,
                   tables[best].name);
        } else {
            chosen = (enum dj_isa)want;
        }
    }
}

const struct dj_kernels *dj_kernels(void) {
    pthread_once(&once, init_tables);
    return &tables[chosen];
}

const struct dj_kernels *dj_kernels_for_isa(enum dj_isa isa) {
    pthread_once(&once, init_tables);
    if ((int)isa < 0 || isa >= DJ_ISA_COUNT || !available[isa]) return NULL;
    return &tables[isa];
}

const char *dj_isa_name(enum dj_isa isa) {
    switch (isa) {
    case DJ_ISA_GENERIC: return "generic";
    case DJ_ISA_AVX2: return "avx2";
    case DJ_ISA_AVX512: return "avx512";
    case DJ_ISA_AVX512BF16: return "avx512bf16";
    case DJ_ISA_AMX: return "amx";
    default: return "unknown";
    }
}

size_t dj_kernels_act_row_bytes(int act_type, int64_t k) {
    size_t n = 0;
    const bool ok = act_type >= 0 && dj_row_bytes((uint32_t)act_type, k, &n);
    DJ_ASSERT(ok);
    return n;
}

enum dj_wpath dj_kernels_wpath(const struct dj_kernels *k, uint32_t type) {
    if (type >= DJ_TYPE_COUNT || !k->w[type].matmul || !k->w[type].dot || !k->w[type].dequantize_row)
        return DJ_WPATH_NONE;
    pthread_once(&once, init_tables);
    if (k->isa == DJ_ISA_GENERIC || k->w[type].matmul == tables[DJ_ISA_GENERIC].w[type].matmul)
        return DJ_WPATH_REFERENCE;
    return DJ_WPATH_FAST;
}

const char *dj_wpath_name(enum dj_wpath p) {
    switch (p) {
    case DJ_WPATH_FAST: return "fast";
    case DJ_WPATH_REFERENCE: return "reference";
    default: return "none";
    }
}

const char *dj_kernels_why_not(uint32_t type) {
    switch (type) {
    case DJ_TYPE_Q8_1:
    case DJ_TYPE_Q8_K: return "an activation type of ggml's CPU backend, not a weight type; no released file holds it";
    case DJ_TYPE_I8:
    case DJ_TYPE_I16:
    case DJ_TYPE_I32:
    case DJ_TYPE_I64:
    case DJ_TYPE_F64: return "an integer/f64 tensor type; no model architecture deja runs has matrices of it";
    default: break;
    }
    if (!dj_type_info(type)) return "an unknown type id (newer than this deja, or a damaged file)";
    return "no kernel for it in this build (a dequantizer and a dot product in src/kernels would be needed)";
}
