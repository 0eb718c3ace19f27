/*
 * test_gpu.h — the GPU mode of the model tests: DJ_TEST_GPU=N runs their forward passes on
 * Vulkan device N - 1 (ctx_params.gpu / engine_params.gpu; CTest's *_vulkan_* entries set
 * N = 1, lavapipe in CI).
 */
#ifndef DJ_TEST_GPU_H
#define DJ_TEST_GPU_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/vulkan/vk.h"

/* *gpu = DJ_TEST_GPU (0: the CPU).  Returns 77 (CTest's SKIP) after printing why when that
 * device does not exist, else 0 (with GPU mode, the device's name printed). */
static inline int test_gpu_begin(uint32_t *gpu) {
    const char *env = getenv("DJ_TEST_GPU");
    *gpu = env ? (uint32_t)atoi(env) : 0;
    if (!*gpu) return 0;
    struct dj_vk_device_info dev[8];
    size_t n = 0;
    if (dj_vk_devices(dev, 8, &n) != DJ_OK || n < *gpu || *gpu > 8) {
        printf("SKIP: no Vulkan device %u: %s\n", *gpu - 1, n ? "fewer devices" : dj_vk_why_none());
        return 77;
    }
    printf("GPU: vulkan:%u %s\n", *gpu - 1, dev[*gpu - 1].name);
    return 0;
}

#endif
