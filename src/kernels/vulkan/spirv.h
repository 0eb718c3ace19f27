/*
 * spirv.h — the shaders compiled at build time (glslc) and embedded by
 * cmake/embed_spirv.cmake into the generated vk_spirv.c: a table ended by a NULL name.
 */
#ifndef DJ_KERNELS_VULKAN_SPIRV_H
#define DJ_KERNELS_VULKAN_SPIRV_H

#include <stddef.h>

struct dj_vk_spirv {
    const char *name; /* the shader's file name without .comp, with its weight type: "mm_q4_0" */
    const unsigned char *code; /* 4-byte aligned SPIR-V words */
    size_t bytes;
};
extern const struct dj_vk_spirv dj_vk_spirv[];

#endif
