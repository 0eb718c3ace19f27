/*
 * quants_avx2.c — AVX2 kernels of the weight types beyond the seven of
 * kernels_avx2.c.  (Filled in per type; see cpu_internal.h.)
 */
#include "kernels/cpu/cpu_internal.h"

void dj_kernels_init_avx2_quants(struct dj_kernels *k) { (void)k; }
