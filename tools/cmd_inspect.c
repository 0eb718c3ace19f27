/*
 * cmd_inspect.c — `deja inspect MODEL`: what a GGUF file holds.
 *
 * Prints the architecture and its hyperparameters (keys "<arch>.*"), tensor
 * counts and bytes by type, the vocabulary (type, size, special ids) and
 * whether a chat template is present.  --metadata lists every key/value,
 * --tensors every tensor.  A bad file gives the reader's one-line message and
 * exit status 1.  `deja inspect --devices` (no model) lists the compute devices:
 * the CPU's kernel table and what Vulkan reports (src/kernels/vulkan/vk.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/ggml_type.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kernels/vulkan/vk.h"
#include "tokenizer/tokenizer.h"

static void inspect_usage(FILE *f) {
    fprintf(f,
            "usage: deja inspect MODEL.gguf [--metadata] [--tensors]\n"
            "       deja inspect --devices\n"
            "  prints architecture, hyperparameters, tensor counts and bytes by type,\n"
            "  vocabulary type/size/special ids and whether a chat template is present.\n"
            "  --metadata  also list every metadata key and value (arrays summarized)\n"
            "  --tensors   also list every tensor: name, type, shape, offset, bytes\n"
            "  --devices   list the compute devices: the CPU kernel table and every Vulkan device\n"
            "              (vulkan:N is the N of `deja bench --device vulkan:N`; docs/ARCHITECTURE.md, GPU)\n");
}

/* `deja inspect --devices`: the CPU, then Vulkan's devices or why there are none. */
static int inspect_devices(void) {
    printf("cpu: %s kernel table\n", dj_kernels()->name);
    struct dj_vk_device_info dev[16];
    size_t n = 0;
    if (dj_vk_devices(dev, 16, &n) != DJ_OK) {
        printf("vulkan: %s\n", dj_last_error());
        return 0;
    }
    if (!n) printf("vulkan: no devices: %s\n", dj_vk_why_none());
    for (size_t i = 0; i < n && i < 16; i++)
        printf("vulkan:%zu: %s (%s, vendor 0x%04x, device 0x%04x, Vulkan %u.%u.%u, %.1f GiB device-local, "
               "subgroup %u)\n",
               i, dev[i].name, dev[i].type, dev[i].vendor_id, dev[i].device_id, (dev[i].api_version >> 22) & 0x7Fu,
               (dev[i].api_version >> 12) & 0x3FFu, dev[i].api_version & 0xFFFu,
               (double)dev[i].device_local_bytes / (1024.0 * 1024.0 * 1024.0), dev[i].subgroup_size);
    return 0;
}

/* Prints a scalar or string value; arrays as "[type x n]" plus the first items. */
static void print_value(const struct gguf_ctx *g, size_t i) {
    enum gguf_type t = gguf_kv_type(g, i);
    if (t == GGUF_TYPE_STRING) {
        struct gguf_str s;
        gguf_kv_str(g, i, &s);
        size_t n = s.len > 80 ? 80 : s.len;
        putchar('"');
        for (size_t k = 0; k < n; k++) {
            unsigned char c = (unsigned char)s.ptr[k];
            if (c == '\n') fputs("\\n", stdout);
            else if (c < 0x20) printf("\\x%02x", c);
            else putchar(c);
        }
        printf("\"%s", s.len > 80 ? "…" : "");
        if (s.len > 80) printf(" (%zu bytes)", s.len);
        return;
    }
    if (t == GGUF_TYPE_ARRAY) {
        struct gguf_arr a;
        gguf_kv_arr(g, i, &a);
        printf("[%s x %zu]", gguf_type_name(a.type), a.n);
        size_t show = a.n < 4 ? a.n : 4;
        if (a.type == GGUF_TYPE_STRING) {
            for (size_t k = 0; k < show; k++) {
                size_t n = a.strs[k].len > 24 ? 24 : a.strs[k].len;
                printf(" \"%.*s\"", (int)n, a.strs[k].ptr);
            }
        } else if (a.type == GGUF_TYPE_FLOAT32 || a.type == GGUF_TYPE_FLOAT64) {
            for (size_t k = 0; k < show; k++) printf(" %g", gguf_arr_f64(&a, k));
        } else if (a.type != GGUF_TYPE_ARRAY) {
            for (size_t k = 0; k < show; k++) printf(" %" PRId64, gguf_arr_i64(&a, k));
        }
        if (a.n > show) printf(" …");
        return;
    }
    const void *p = gguf_kv_scalar(g, i);
    union {
        uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
        uint64_t u64; int64_t i64; float f32; double f64;
    } v;
    memcpy(&v, p, gguf_type_size(t));
    switch (t) {
    case GGUF_TYPE_UINT8: printf("%u", v.u8); break;
    case GGUF_TYPE_INT8: printf("%d", v.i8); break;
    case GGUF_TYPE_UINT16: printf("%u", v.u16); break;
    case GGUF_TYPE_INT16: printf("%d", v.i16); break;
    case GGUF_TYPE_UINT32: printf("%" PRIu32, v.u32); break;
    case GGUF_TYPE_INT32: printf("%" PRId32, v.i32); break;
    case GGUF_TYPE_UINT64: printf("%" PRIu64, v.u64); break;
    case GGUF_TYPE_INT64: printf("%" PRId64, v.i64); break;
    case GGUF_TYPE_FLOAT32: printf("%g", v.f32); break;
    case GGUF_TYPE_FLOAT64: printf("%g", v.f64); break;
    case GGUF_TYPE_BOOL: printf("%s", v.u8 ? "true" : "false"); break;
    default: printf("?"); break;
    }
}

static void fmt_bytes(char *b, size_t bn, size_t n) {
    if (n >= (1u << 30)) snprintf(b, bn, "%.2f GiB", (double)n / (1u << 30));
    else if (n >= (1u << 20)) snprintf(b, bn, "%.2f MiB", (double)n / (1u << 20));
    else if (n >= 1024) snprintf(b, bn, "%.1f KiB", (double)n / 1024);
    else snprintf(b, bn, "%zu B", n);
}

static void print_bytes(size_t n) {
    char b[32];
    fmt_bytes(b, sizeof b, n);
    fputs(b, stdout);
}

static void print_vocab(const struct gguf_ctx *g) {
    struct dj_vocab *v = NULL;
    if (gguf_find_key(g, "tokenizer.ggml.model") < 0) {
        printf("vocab:           none (no tokenizer.ggml.model)\n");
        return;
    }
    if (vocab_load_gguf(g, &v) != DJ_OK) {
        printf("vocab:           not loadable: %s\n", dj_last_error());
        return;
    }
    printf("vocab:           %s (pre-tokenizer %s), %zu tokens\n", vocab_type_name(v), vocab_pre_name(v),
           vocab_n_tokens(v));
    struct { const char *name; dj_token id; } ids[] = {
        {"bos", vocab_bos(v)}, {"eos", vocab_eos(v)}, {"eot", vocab_eot(v)}, {"unk", vocab_unk(v)}, {"pad", vocab_pad(v)},
    };
    printf("special ids:    ");
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        if (ids[k].id < 0) continue;
        printf(" %s=%d '%s'", ids[k].name, ids[k].id, vocab_token_text(v, ids[k].id));
    }
    printf("\nadd bos/eos:     %s/%s, space prefix %s\n", vocab_add_bos(v) ? "yes" : "no",
           vocab_add_eos(v) ? "yes" : "no", vocab_add_space_prefix(v) ? "yes" : "no");
    dj_vocab_free(v);
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool show_kv = false, show_tensors = false, show_devices = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            inspect_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--metadata")) {
            show_kv = true;
        } else if (!strcmp(argv[i], "--tensors")) {
            show_tensors = true;
        } else if (!strcmp(argv[i], "--devices")) {
            show_devices = true;
        } else if (!strcmp(argv[i], "-m")) {
            if (!(path = cli_value("inspect", argc, argv, &i))) return 1;
        } else if (argv[i][0] == '-') {
            inspect_usage(stderr);
            return cli_error("inspect", "unknown option '%s'", argv[i]);
        } else if (!path) {
            path = argv[i];
        } else {
            return cli_error("inspect", "one model at a time (got '%s' and '%s')", path, argv[i]);
        }
    }
    if (show_devices && !path) return inspect_devices();
    if (show_devices) return cli_error("inspect", "--devices takes no model");
    if (!path) {
        inspect_usage(stderr);
        return cli_error("inspect", "no model given");
    }
    struct gguf_ctx *g = NULL;
    if (gguf_open(path, &g) != DJ_OK) return cli_error("inspect", "%s", dj_last_error());

    printf("file:            %s (", path);
    print_bytes(gguf_file_size(g));
    printf(", GGUF v%u, alignment %zu, %zu metadata keys)\n", gguf_version(g), gguf_alignment(g), gguf_n_kv(g));

    struct gguf_str arch = {"", 0}, name;
    gguf_get_str(g, "general.architecture", &arch);
    printf("architecture:    %.*s\n", (int)arch.len, arch.ptr);
    if (gguf_get_str(g, "general.name", &name) == DJ_OK) printf("name:            %.*s\n", (int)name.len, name.ptr);
    uint32_t ftype;
    if (gguf_get_u32(g, "general.file_type", &ftype) == DJ_OK) printf("file type:       %u\n", ftype);

    /* Hyperparameters: every "<arch>." key, in file order. */
    if (arch.len > 0) {
        printf("hyperparameters:\n");
        for (size_t i = 0; i < gguf_n_kv(g); i++) {
            struct gguf_str k = gguf_kv_key(g, i);
            if (k.len <= arch.len + 1 || memcmp(k.ptr, arch.ptr, arch.len) || k.ptr[arch.len] != '.') continue;
            printf("  %-40.*s ", (int)(k.len - arch.len - 1), k.ptr + arch.len + 1);
            print_value(g, i);
            putchar('\n');
        }
    }

    /* Tensors by type. */
    size_t n_by_type[DJ_TYPE_COUNT] = {0}, bytes_by_type[DJ_TYPE_COUNT] = {0}, total = 0;
    double n_params = 0;
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        n_by_type[t->type]++;
        bytes_by_type[t->type] += t->nbytes;
        total += t->nbytes;
        double ne = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) ne *= (double)t->ne[d];
        n_params += ne;
    }
    printf("tensors:         %zu, ", gguf_n_tensors(g));
    print_bytes(total);
    printf(", %.2f M parameters\n", n_params / 1e6);
    /* Per type, how this machine runs its matrices (the table dj_kernels() picked:
     * "fast" = a kernel of that ISA, "reference" = the portable C path).  Vectors
     * (norms, biases) are f32 and read directly. */
    const struct dj_kernels *kt = dj_kernels();
    for (int t = 0; t < DJ_TYPE_COUNT; t++) {
        if (!n_by_type[t]) continue;
        char b[32];
        fmt_bytes(b, sizeof b, bytes_by_type[t]);
        printf("  %-8s %5zu tensors  %-11s", dj_type_name((uint32_t)t), n_by_type[t], b);
        const enum dj_wpath p = dj_kernels_wpath(kt, (uint32_t)t);
        if (p == DJ_WPATH_FAST) printf("  kernel: fast (%s)", kt->name);
        else if (p == DJ_WPATH_REFERENCE) printf("  kernel: reference (portable C)");
        else if (t == DJ_TYPE_F32) printf("  kernel: -");
        else printf("  kernel: none: %s", dj_kernels_why_not((uint32_t)t));
        putchar('\n');
    }

    print_vocab(g);
    struct gguf_str tmpl;
    if (gguf_get_str(g, "tokenizer.chat_template", &tmpl) == DJ_OK)
        printf("chat template:   present (%zu bytes)\n", tmpl.len);
    else
        printf("chat template:   absent\n");

    if (show_kv) {
        printf("metadata:\n");
        for (size_t i = 0; i < gguf_n_kv(g); i++) {
            struct gguf_str k = gguf_kv_key(g, i);
            printf("  %-48.*s %-7s ", (int)k.len, k.ptr, gguf_type_name(gguf_kv_type(g, i)));
            print_value(g, i);
            putchar('\n');
        }
    }
    if (show_tensors) {
        printf("tensor list:\n");
        for (size_t i = 0; i < gguf_n_tensors(g); i++) {
            const struct gguf_tensor *t = gguf_tensor(g, i);
            printf("  %-40.*s %-6s [", (int)t->name.len, t->name.ptr, dj_type_name(t->type));
            for (uint32_t d = 0; d < t->n_dims; d++) printf("%s%" PRId64, d ? ", " : "", t->ne[d]);
            printf("] offset %" PRIu64 " bytes %zu\n", t->offset, t->nbytes);
        }
    }
    gguf_close(g);
    return 0;
}
