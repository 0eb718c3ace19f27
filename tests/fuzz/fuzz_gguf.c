/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader.  Each input is opened
 * with gguf_open_memory; if it opens, every key is read through every typed
 * getter and the index-based accessors, every array element (nested arrays
 * and strings included) is touched, and the first and last byte of every
 * tensor's data are read, so that any range the reader accepted but did not
 * really check shows up under ASan.  Seeds: tests/fuzz/seed.sh.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void touch(const void *p, size_t n) {
    if (n) sink += ((const uint8_t *)p)[0] + ((const uint8_t *)p)[n - 1];
}

static void walk_arr(const struct gguf_arr *a) {
    for (size_t i = 0; i < a->n; i++) {
        switch (a->type) {
        case GGUF_TYPE_STRING: touch(a->strs[i].ptr, a->strs[i].len); break;
        case GGUF_TYPE_ARRAY: walk_arr(&a->arrs[i]); break;
        case GGUF_TYPE_FLOAT32:
        case GGUF_TYPE_FLOAT64: sink += gguf_arr_f64(a, i) > 0; break;
        default: sink += (uint64_t)gguf_arr_i64(a, i) + (gguf_arr_f64(a, i) > 0); break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_ctx *g = NULL;
    if (gguf_open_memory(data, size, "fuzz.gguf", &g) != DJ_OK) return 0;
    sink += gguf_version(g) + gguf_alignment(g) + gguf_data_offset(g) + gguf_file_size(g);
    for (size_t i = 0; i < gguf_n_kv(g); i++) {
        struct gguf_str k = gguf_kv_key(g, i), s;
        struct gguf_arr a;
        enum gguf_type t = gguf_kv_type(g, i);
        touch(k.ptr, k.len);
        sink += strlen(gguf_type_name(t));
        if (gguf_kv_str(g, i, &s) == DJ_OK) touch(s.ptr, s.len);
        if (gguf_kv_arr(g, i, &a) == DJ_OK) walk_arr(&a);
        const void *p = gguf_kv_scalar(g, i);
        if (p) touch(p, gguf_type_size(t));

        char key[256];
        if (k.len >= sizeof key || memchr(k.ptr, 0, k.len)) continue;
        memcpy(key, k.ptr, k.len);
        key[k.len] = '\0';
        if (gguf_find_key(g, key) != (int64_t)i) __builtin_trap(); /* keys are unique */
        uint32_t u32; int32_t i32; uint64_t u64; int64_t i64; float f32; double f64; bool b;
        sink += gguf_get_u32(g, key, &u32) + gguf_get_i32(g, key, &i32) + gguf_get_u64(g, key, &u64) +
                gguf_get_i64(g, key, &i64) + gguf_get_f32(g, key, &f32) + gguf_get_f64(g, key, &f64) +
                gguf_get_bool(g, key, &b);
        if (gguf_get_str(g, key, &s) == DJ_OK) touch(s.ptr, s.len);
        if (gguf_get_arr(g, key, &a) == DJ_OK) walk_arr(&a);
    }
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        touch(t->name.ptr, t->name.len);
        touch(t->data, t->nbytes);
        if ((const uint8_t *)t->data < data || (const uint8_t *)t->data + t->nbytes > data + size) __builtin_trap();
        char nm[256];
        if (t->name.len >= sizeof nm || memchr(t->name.ptr, 0, t->name.len)) continue;
        memcpy(nm, t->name.ptr, t->name.len);
        nm[t->name.len] = '\0';
        if (gguf_find_tensor(g, nm) != t) __builtin_trap(); /* names are unique */
    }
    gguf_close(g);
    return 0;
}
