/*
 * quants_generic.c — the reference-path kernels of the weight types beyond the
 * seven of kernels_generic.c.  (Filled in per type; see cpu_internal.h.)
 */
#include "kernels/cpu/cpu_internal.h"

void dj_kernels_init_generic_quants(struct dj_kernels *k) { (void)k; }
