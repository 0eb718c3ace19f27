/*
 * test_gguf_reader.c — the GGUF reader on the real files in ../shared: every
 * model and vocab file opens, every key is reachable through its getters,
 * every tensor's data lies inside the file at an aligned offset, and known
 * facts about each file hold (architecture, vocab sizes, tensor shapes and
 * types, bytes of the data compared with the raw file).  Also the I/O errors
 * of gguf_open and the typed getters' conversions and type errors.
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "core/ggml_type.h"
#include "gguf/gguf.h"
#include "test.h"

static const char *shared;

static bool str_is(struct gguf_str s, const char *want) {
    return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

/* Walks every key through the index-based and the key-based getters. */
static void check_all_keys(const struct gguf_ctx *g) {
    for (size_t i = 0; i < gguf_n_kv(g); i++) {
        struct gguf_str k = gguf_kv_key(g, i);
        char key[512];
        CHECK(k.len > 0 && k.len < sizeof key);
        if (k.len == 0 || k.len >= sizeof key) continue;
        memcpy(key, k.ptr, k.len);
        key[k.len] = '\0';
        CHECKF(gguf_find_key(g, key) == (int64_t)i, "%s: key %s", gguf_name(g), key);
        enum gguf_type t = gguf_kv_type(g, i);
        CHECK(t < GGUF_TYPE_COUNT);
        struct gguf_str s;
        struct gguf_arr a;
        if (t == GGUF_TYPE_STRING) {
            CHECK(gguf_get_str(g, key, &s) == DJ_OK);
            CHECK(gguf_kv_str(g, i, &s) == DJ_OK);
            CHECK(gguf_kv_scalar(g, i) == NULL);
            CHECK(gguf_get_arr(g, key, &a) == DJ_ERR_TYPE);
        } else if (t == GGUF_TYPE_ARRAY) {
            CHECK(gguf_get_arr(g, key, &a) == DJ_OK);
            CHECK(gguf_kv_arr(g, i, &a) == DJ_OK);
            CHECK(gguf_kv_str(g, i, &s) == DJ_ERR_TYPE);
            if (a.type == GGUF_TYPE_STRING) {
                for (size_t j = 0; j < a.n; j++) CHECK(a.strs[j].len == 0 || a.strs[j].ptr != NULL);
            }
        } else {
            CHECK(gguf_kv_scalar(g, i) != NULL);
            CHECK(gguf_get_str(g, key, &s) == DJ_ERR_TYPE);
            CHECK(strstr(dj_last_error(), key) != NULL);
        }
    }
}

/* Every tensor: aligned, inside the file, consistent with its shape and type. */
static void check_all_tensors(const struct gguf_ctx *g, const uint8_t *file, size_t file_size) {
    size_t align = gguf_alignment(g), data = gguf_data_offset(g);
    CHECK(data % align == 0 || gguf_n_tensors(g) == 0);
    CHECK(data <= gguf_file_size(g));
    CHECK(gguf_file_size(g) == file_size);
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        CHECK(t->offset % align == 0);
        CHECKF(data + t->offset + t->nbytes <= file_size, "%s: tensor %zu", gguf_name(g), i);
        size_t row, nb;
        CHECK(dj_row_bytes(t->type, t->ne[0], &row));
        nb = row * (size_t)t->ne[1] * (size_t)t->ne[2] * (size_t)t->ne[3];
        CHECK(nb == t->nbytes);
        char name[256];
        CHECK(t->name.len < sizeof name);
        memcpy(name, t->name.ptr, t->name.len < 255 ? t->name.len : 255);
        name[t->name.len < 255 ? t->name.len : 255] = '\0';
        CHECK(gguf_find_tensor(g, name) == t);
        /* the data pointer is the file's bytes at data_offset + offset */
        CHECK(t->nbytes == 0 || memcmp(t->data, file + data + t->offset, t->nbytes) == 0);
    }
}

static void check_file(const char *path) {
    size_t size = 0;
    uint8_t *file = (uint8_t *)test_read_file(path, &size);
    CHECKF(file != NULL, "%s", path);
    if (!file) return;
    struct gguf_ctx *g = NULL;
    enum dj_status st = gguf_open(path, &g);
    CHECKF(st == DJ_OK, "%s: %s", path, dj_last_error());
    if (st == DJ_OK) {
        CHECK(strcmp(gguf_name(g), path) == 0);
        CHECK(gguf_version(g) == 3);
        check_all_keys(g);
        check_all_tensors(g, file, size);
        struct gguf_str arch;
        CHECKF(gguf_get_str(g, "general.architecture", &arch) == DJ_OK && arch.len > 0, "%s", path);
        struct gguf_arr toks;
        CHECKF(gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) == DJ_OK && toks.type == GGUF_TYPE_STRING && toks.n > 0,
               "%s", path);
        /* the same image from memory gives the same tables */
        struct gguf_ctx *m = NULL;
        CHECK(gguf_open_memory(file, size, "mem", &m) == DJ_OK);
        if (m) {
            CHECK(gguf_n_kv(m) == gguf_n_kv(g) && gguf_n_tensors(m) == gguf_n_tensors(g));
            CHECK(gguf_data_offset(m) == gguf_data_offset(g) && gguf_alignment(m) == gguf_alignment(g));
            for (size_t i = 0; i < gguf_n_tensors(m) && i < gguf_n_tensors(g); i++)
                CHECK(gguf_tensor(m, i)->offset == gguf_tensor(g, i)->offset &&
                      gguf_tensor(m, i)->nbytes == gguf_tensor(g, i)->nbytes);
            gguf_close(m);
        }
    }
    gguf_close(g);
    free(file);
}

static struct gguf_ctx *open_shared(const char *rel) {
    struct gguf_ctx *g = NULL;
    enum dj_status st = gguf_open(test_shared_path(shared, rel), &g);
    CHECKF(st == DJ_OK, "%s: %s", rel, dj_last_error());
    return g;
}

static void test_stories(void) {
    struct gguf_ctx *g = open_shared("models/stories260K.gguf");
    if (!g) return;
    struct gguf_str s;
    struct gguf_arr a;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    bool b;

    CHECK(gguf_n_kv(g) == 19);
    CHECK(gguf_n_tensors(g) == 48);
    CHECK(gguf_alignment(g) == 32);
    CHECK(gguf_data_offset(g) == 14176); /* header ends at 14152, aligned up to 32 */
    CHECK(gguf_get_str(g, "general.architecture", &s) == DJ_OK && str_is(s, "llama"));
    CHECK(gguf_get_str(g, "tokenizer.ggml.model", &s) == DJ_OK && str_is(s, "llama"));
    CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", &a) == DJ_OK);
    CHECK(a.type == GGUF_TYPE_STRING && a.n == 512);
    CHECK(a.n == 512 && str_is(a.strs[0], "<unk>") && str_is(a.strs[1], "<s>") && str_is(a.strs[2], "</s>"));
    CHECK(gguf_get_arr(g, "tokenizer.ggml.scores", &a) == DJ_OK && a.type == GGUF_TYPE_FLOAT32 && a.n == 512);
    CHECK(gguf_get_arr(g, "tokenizer.ggml.token_type", &a) == DJ_OK && a.type == GGUF_TYPE_INT32 && a.n == 512);
    CHECK(gguf_arr_i64(&a, 0) == 2 && gguf_arr_i64(&a, 1) == 3 && gguf_arr_f64(&a, 2) == 3.0);

    /* integer getters convert between integer types when the value fits */
    CHECK(gguf_get_u32(g, "llama.embedding_length", &u32) == DJ_OK && u32 == 64);
    CHECK(gguf_get_i32(g, "llama.embedding_length", &i32) == DJ_OK && i32 == 64);
    CHECK(gguf_get_u64(g, "llama.feed_forward_length", &u64) == DJ_OK && u64 == 172);
    CHECK(gguf_get_i64(g, "llama.block_count", &i64) == DJ_OK && i64 == 5);
    CHECK(gguf_get_u32(g, "llama.attention.head_count_kv", &u32) == DJ_OK && u32 == 4);
    /* seperator_token_id is u32 4294967295: fits u32/u64/i64, not i32 */
    CHECK(gguf_get_u32(g, "tokenizer.ggml.seperator_token_id", &u32) == DJ_OK && u32 == UINT32_MAX);
    CHECK(gguf_get_i64(g, "tokenizer.ggml.seperator_token_id", &i64) == DJ_OK && i64 == 4294967295LL);
    i32 = 7;
    CHECK(gguf_get_i32(g, "tokenizer.ggml.seperator_token_id", &i32) == DJ_ERR_TYPE && i32 == 7);
    CHECK(strstr(dj_last_error(), "does not fit") && strstr(dj_last_error(), "seperator_token_id"));
    CHECK(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f32) == DJ_OK && fabsf(f32 - 1e-5f) < 1e-10f);
    CHECK(gguf_get_f64(g, "llama.attention.layer_norm_rms_epsilon", &f64) == DJ_OK && fabs(f64 - 1e-5) < 1e-10);
    /* type errors name the key and both types; *out untouched */
    u32 = 99;
    CHECK(gguf_get_u32(g, "general.architecture", &u32) == DJ_ERR_TYPE && u32 == 99);
    CHECK(strstr(dj_last_error(), "general.architecture") && strstr(dj_last_error(), "string") &&
          strstr(dj_last_error(), "u32"));
    CHECK(gguf_get_f32(g, "llama.block_count", &f32) == DJ_ERR_TYPE);
    CHECK(gguf_get_bool(g, "llama.block_count", &b) == DJ_ERR_TYPE);
    CHECK(gguf_get_arr(g, "general.name", &a) == DJ_ERR_TYPE);
    CHECK(gguf_get_str(g, "no.such.key", &s) == DJ_ERR_NOT_FOUND && strstr(dj_last_error(), "no.such.key"));
    CHECK(gguf_get_u32(g, "no.such.key", &u32) == DJ_ERR_NOT_FOUND);
    CHECK(gguf_find_key(g, "no.such.key") == -1 && gguf_find_key(g, "") == -1);
    CHECK(gguf_find_key(g, "tokenizer.ggml.tokens") == 0);
    int64_t ie = gguf_find_key(g, "llama.embedding_length");
    CHECK(ie >= 0 && gguf_kv_type(g, (size_t)ie) == GGUF_TYPE_UINT32);
    if (ie >= 0) {
        uint32_t raw;
        memcpy(&raw, gguf_kv_scalar(g, (size_t)ie), 4);
        CHECK(raw == 64);
        CHECK(gguf_kv_arr(g, (size_t)ie, &a) == DJ_ERR_TYPE);
    }
    CHECK(gguf_kv_str(g, 1000, &s) == DJ_ERR_INVALID);

    const struct gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK(t->type == DJ_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 && t->ne[2] == 1 &&
              t->ne[3] == 1 && t->nbytes == 64 * 512 * 4 && t->offset == 0);
        CHECK((const uint8_t *)t->data - (const uint8_t *)gguf_tensor(g, 0)->data == 0);
        CHECK(str_is(t->name, "token_embd.weight"));
    }
    t = gguf_find_tensor(g, "blk.4.ffn_norm.weight");
    CHECK(t && t->n_dims == 1 && t->ne[0] == 64 && t->offset == 1170944);
    /* the last tensor ends exactly at the end of the file */
    CHECK(t && gguf_data_offset(g) + t->offset + t->nbytes == gguf_file_size(g));
    t = gguf_find_tensor(g, "blk.0.ffn_gate.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 172);
    CHECK(gguf_find_tensor(g, "no.such.tensor") == NULL);
    gguf_close(g);
}

static void test_codelm(void) {
    struct gguf_ctx *g = open_shared("models/codelm-15m-f16.gguf");
    if (!g) return;
    struct gguf_arr a;
    struct gguf_str s;
    uint32_t u32;
    CHECK(gguf_n_tensors(g) == 74 && gguf_n_kv(g) == 26);
    CHECK(gguf_get_str(g, "general.architecture", &s) == DJ_OK && str_is(s, "llama"));
    CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", &a) == DJ_OK && a.type == GGUF_TYPE_STRING && a.n == 32256);
    CHECK(a.n == 32256 && str_is(a.strs[0], "!"));
    CHECK(gguf_get_u32(g, "general.file_type", &u32) == DJ_OK && u32 == 1);
    const struct gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == DJ_TYPE_F16 && t->ne[0] == 256 && t->ne[1] == 32256 && t->nbytes == 256u * 32256u * 2u);
    t = gguf_find_tensor(g, "blk.7.ffn_down.weight");
    CHECK(t && t->type == DJ_TYPE_F16 && t->ne[0] == 768 && t->ne[1] == 256);
    size_t n_f16 = 0;
    for (size_t i = 0; i < gguf_n_tensors(g); i++) n_f16 += gguf_tensor(g, i)->type == DJ_TYPE_F16;
    CHECK(n_f16 == 1 + 8 * 7); /* token_embd + 7 matrices per layer; norms stay f32 */
    gguf_close(g);
}

static void test_vocab_and_aidreams(void) {
    struct gguf_ctx *g = open_shared("vocab/ggml-vocab-llama-spm.gguf");
    if (g) {
        struct gguf_arr a;
        bool b = false;
        CHECK(gguf_n_tensors(g) == 0 && gguf_n_kv(g) == 22);
        CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", &a) == DJ_OK && a.n == 32000);
        CHECK(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == DJ_OK && b == true);
        CHECK(gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == DJ_OK && b == false);
        /* no tensors and no padding: the data section is the (empty) end of the file */
        CHECK(gguf_data_offset(g) == gguf_file_size(g) && gguf_file_size(g) == 723869);
        gguf_close(g);
    }
    g = open_shared("vocab/ggml-vocab-deepseek-llm.gguf");
    if (g) {
        struct gguf_arr a;
        CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", &a) == DJ_OK && a.n == 102400);
        CHECK(gguf_get_arr(g, "tokenizer.ggml.merges", &a) == DJ_OK && a.type == GGUF_TYPE_STRING && a.n > 0);
        gguf_close(g);
    }
    g = open_shared("models/aidreams260K.gguf");
    if (g) {
        uint32_t u32;
        CHECK(gguf_n_tensors(g) == 39);
        CHECK(gguf_get_u32(g, "general.alignment", &u32) == DJ_OK && u32 == 32 && gguf_alignment(g) == 32);
        gguf_close(g);
    }
}

static void test_every_shared_file(void) {
    const char *dirs[] = {"models", "vocab"};
    size_t n_files = 0;
    for (int d = 0; d < 2; d++) {
        DIR *dir = opendir(test_shared_path(shared, dirs[d]));
        CHECK(dir != NULL);
        if (!dir) continue;
        struct dirent *de;
        while ((de = readdir(dir)) != NULL) {
            size_t len = strlen(de->d_name);
            if (len < 5 || strcmp(de->d_name + len - 5, ".gguf") != 0) continue;
            char rel[512];
            snprintf(rel, sizeof rel, "%s/%s", dirs[d], de->d_name);
            check_file(test_shared_path(shared, rel));
            n_files++;
        }
        closedir(dir);
    }
    CHECKF(n_files >= 12, "found %zu .gguf files", n_files); /* 3 models + 9 vocabs */
}

static void test_open_errors(void) {
    struct gguf_ctx *g = (struct gguf_ctx *)0x1;
    CHECK(gguf_open("/nonexistent/dir/x.gguf", &g) == DJ_ERR_IO);
    CHECK(g == (struct gguf_ctx *)0x1); /* out-param untouched on failure */
    CHECK(strstr(dj_last_error(), "/nonexistent/dir/x.gguf") != NULL);
    CHECK(gguf_open(shared, &g) == DJ_ERR_IO); /* a directory */
    CHECK(strstr(dj_last_error(), "regular file") != NULL);

    char path[] = "/tmp/dj_gguf_empty_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        close(fd);
        CHECK(gguf_open(path, &g) == DJ_ERR_FORMAT); /* empty file */
        CHECK(strstr(dj_last_error(), path) != NULL);
        unlink(path);
    }
    CHECK(gguf_open_memory(NULL, 0, "empty", &g) == DJ_ERR_FORMAT);
    CHECK(strstr(dj_last_error(), "empty") != NULL);
    gguf_close(NULL); /* accepts NULL */
}

static void test_type_names(void) {
    CHECK(strcmp(gguf_type_name(GGUF_TYPE_UINT32), "u32") == 0);
    CHECK(strcmp(gguf_type_name(GGUF_TYPE_STRING), "string") == 0);
    CHECK(strcmp(gguf_type_name(GGUF_TYPE_ARRAY), "array") == 0);
    CHECK(strcmp(gguf_type_name(GGUF_TYPE_FLOAT64), "f64") == 0);
    CHECK(strcmp(gguf_type_name((enum gguf_type)13), "unknown") == 0);
    CHECK(gguf_type_size(GGUF_TYPE_BOOL) == 1 && gguf_type_size(GGUF_TYPE_UINT16) == 2);
    CHECK(gguf_type_size(GGUF_TYPE_FLOAT32) == 4 && gguf_type_size(GGUF_TYPE_INT64) == 8);
    CHECK(gguf_type_size(GGUF_TYPE_STRING) == 0 && gguf_type_size(GGUF_TYPE_ARRAY) == 0);
}

int main(int argc, char **argv) {
    shared = argc > 1 ? argv[1] : "../shared";
    test_type_names();
    test_open_errors();
    test_stories();
    test_codelm();
    test_vocab_and_aidreams();
    test_every_shared_file();
    TEST_END();
}
