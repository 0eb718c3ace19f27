/*
 * pretok.c — BPE pre-tokenizers: llama.cpp's regex lists per
 * tokenizer.ggml.pre, run with hand-written splitters where we have them and
 * with PCRE2 (UTF, JIT) otherwise.  Contracts and regex semantics: pretok.h.
 *
 * The regex strings are llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe),
 * with non-ASCII literals written as \x{...}.  Where llama.cpp runs a pattern
 * through std::wregex, non-ASCII White_Space in the text was first replaced by
 * U+000B, so such characters never match a literal range in a class; the
 * ranges below that contain one (U+3000 in the deepseek classes) are split
 * around it so that PCRE2 gives the same answer.
 *
 * Hand-written splitters (used unless `reference`):
 *   GPT2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
 *           — llama.cpp's unicode_regex_split_custom_gpt2 behaviour
 *   LLAMA3  (?:'[sS]|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *           — unicode_regex_split_custom_llama3; QWEN2 is the same with \p{N}
 *   SIMPLE  \s?C+, C+, C, CCC for a character class C (deepseek-coder's whole
 *           list, starcoder's and falcon's class steps)
 * Every one is checked against PCRE2 by tests/unit/test_tokenizer.c.
 *
 * The text is decoded once per run into code points and class flags; pieces
 * are code point ranges, converted to byte offsets when reported.  Steps are
 * applied depth-first (piece by piece), which gives the same pieces in the
 * same order as llama.cpp's step-by-step passes over the whole list.
 */
#include "tokenizer/pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/status.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_internal.h"

/* ---- the pre-tokenizer table --------------------------------------------- */

enum step_kind { STEP_REGEX, STEP_GPT2, STEP_LLAMA3, STEP_QWEN2, STEP_SIMPLE };
enum simple_cls { SC_CRLF, SC_L, SC_P, SC_N, SC_CJK, SC_DIGIT, SC_P_FALCON, SC_P_DEFAULT };
enum simple_mode { SM_ONE, SM_PLUS, SM_THREE };

struct step_def {
    const char *regex;
    uint8_t kind;
    uint8_t opt_ws; /* SIMPLE: a leading \s? */
    uint8_t cls;    /* SIMPLE: enum simple_cls */
    uint8_t mode;   /* SIMPLE: enum simple_mode */
};

#define R_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define R_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define R_LLAMA3                                                                                                   \
    R_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_QWEN2                                                                                                    \
    R_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* [一-龥ࠀ-一가-퟿] = U+0800-9FA5, U+AC00-D7FF, less the White_Space inside (see above) */
#define R_CJK_DS                                                                                                   \
    "[\\x{800}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}"                  \
    "\\x{2060}-\\x{2FFF}\\x{3001}-\\x{9FA5}\\x{AC00}-\\x{D7FF}]+"
/* deepseek-llm's cased-letter class (A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃) */
#define R_DS_LLM_LETTERS                                                                                           \
    "\\s?[\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"        \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}"             \
    "\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"    \
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"                 \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"                 \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"         \
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"        \
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"                  \
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"                  \
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"                  \
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"                  \
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"                 \
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"               \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"       \
    "\\x{1E900}-\\x{1E943}]+"
/* \s?[!-/:-~！-／：-～‘-‟　-。]+, U+3000 left out (see above) */
#define R_DS_LLM_PUNCT "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}]+"
/*  ?[^(\s|.,!?…。，、।۔،)]+ */
#define R_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

#define FAST(r, k) {r, k, 0, 0, 0}
#define SIMPLE(r, ws, c, m) {r, STEP_SIMPLE, ws, c, m}
#define REGEX(r) {r, STEP_REGEX, 0, 0, 0}

static const struct step_def steps_default[] = {
    SIMPLE("[\\p{P}\\$\\+<=>\\^~\\|]+", 0, SC_P_DEFAULT, SM_PLUS),
    FAST(R_GPT2, STEP_GPT2),
    SIMPLE("\\p{N}+", 0, SC_N, SM_PLUS),
    SIMPLE("[0-9][0-9][0-9]", 0, SC_DIGIT, SM_THREE),
};
static const struct step_def steps_llama3[] = {FAST(R_LLAMA3, STEP_LLAMA3)};
static const struct step_def steps_deepseek_llm[] = {
    SIMPLE("[\r\n]", 0, SC_CRLF, SM_ONE), REGEX(R_DS_LLM_LETTERS), REGEX(R_DS_LLM_PUNCT),
    REGEX("\\s+$"),                       REGEX(R_CJK_DS),          SIMPLE("\\p{N}+", 0, SC_N, SM_PLUS),
};
static const struct step_def steps_deepseek_coder[] = {
    SIMPLE("[\r\n]", 0, SC_CRLF, SM_ONE),      SIMPLE("\\s?\\p{L}+", 1, SC_L, SM_PLUS),
    SIMPLE("\\s?\\p{P}+", 1, SC_P, SM_PLUS),   SIMPLE(R_CJK_DS, 0, SC_CJK, SM_PLUS),
    SIMPLE("\\p{N}", 0, SC_N, SM_ONE),
};
static const struct step_def steps_deepseek3[] = {
    REGEX("\\p{N}{1,3}"),
    REGEX("[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+"),
    REGEX("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
          "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
};
static const struct step_def steps_falcon[] = {
    SIMPLE("[\\p{P}\\$\\+<=>\\^~\\|`]+", 0, SC_P_FALCON, SM_PLUS),
    FAST(R_GPT2, STEP_GPT2),
    SIMPLE("[0-9][0-9][0-9]", 0, SC_DIGIT, SM_THREE),
};
static const struct step_def steps_starcoder[] = {SIMPLE("\\p{N}", 0, SC_N, SM_ONE), FAST(R_GPT2, STEP_GPT2)};
static const struct step_def steps_gpt2[] = {FAST(R_GPT2, STEP_GPT2)};
static const struct step_def steps_qwen2[] = {FAST(R_QWEN2, STEP_QWEN2)};
static const struct step_def steps_poro[] = {REGEX(R_PORO)};
static const struct step_def steps_viking[] = {REGEX(R_PORO), SIMPLE("\\p{N}", 0, SC_N, SM_ONE)};
static const struct step_def steps_tekken[] = {
    REGEX("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])(["
          "^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
};
static const struct step_def steps_gpt4o[] = {
    REGEX("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" R_CONTRACTIONS
          "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" R_CONTRACTIONS
          "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
};
static const struct step_def steps_bailingmoe[] = {
    REGEX("'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]"
          "*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"),
};
static const struct step_def steps_seed_coder[] = {
    REGEX(R_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
};
static const struct step_def steps_qwen35[] = {
    REGEX(R_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                         "\\s+(?!\\S)|\\s+"),
};
static const struct step_def steps_ufakzeka[] = {
    REGEX("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
};

struct pre_def {
    const char *const *names; /* NULL-terminated */
    const struct step_def *steps;
    size_t n_steps;
    bool ignore_merges, add_bos, bos_none;
};

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define NAMES(...) (const char *const[]){__VA_ARGS__, NULL}

/* The name lists are llama.cpp's for each regex set (llama_vocab::impl::load). */
static const struct pre_def pre_defs[] = {
    {NAMES("default"), steps_default, N(steps_default), false, false, false},
    {NAMES("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"),
     steps_llama3, N(steps_llama3), true, true, false},
    {NAMES("dbrx", "smaug-bpe"), steps_llama3, N(steps_llama3), false, false, false},
    {NAMES("glm4", "chatglm-bpe"), steps_llama3, N(steps_llama3), false, false, true},
    {NAMES("deepseek-llm"), steps_deepseek_llm, N(steps_deepseek_llm), false, false, false},
    {NAMES("deepseek-coder"), steps_deepseek_coder, N(steps_deepseek_coder), false, false, false},
    {NAMES("deepseek-v3", "hunyuan-dense", "joyai-llm"), steps_deepseek3, N(steps_deepseek3), false, false, false},
    {NAMES("falcon"), steps_falcon, N(steps_falcon), false, false, false},
    {NAMES("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"),
     steps_starcoder, N(steps_starcoder), false, false, false},
    {NAMES("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
           "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
           "granite-docling", "exaone4"),
     steps_gpt2, N(steps_gpt2), false, false, false},
    {NAMES("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open", "megrez", "grok-2"),
     steps_qwen2, N(steps_qwen2), false, false, false},
    {NAMES("poro-chat", "bloom", "gpt3-finnish"), steps_poro, N(steps_poro), false, false, false},
    {NAMES("viking"), steps_viking, N(steps_viking), false, false, false},
    {NAMES("tekken"), steps_tekken, N(steps_tekken), true, true, false},
    {NAMES("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), steps_gpt4o, N(steps_gpt4o), false, false, false},
    {NAMES("bailingmoe", "bailingmoe2", "llada-moe"), steps_bailingmoe, N(steps_bailingmoe), false, false, false},
    {NAMES("seed-coder"), steps_seed_coder, N(steps_seed_coder), false, false, false},
    {NAMES("qwen35"), steps_qwen35, N(steps_qwen35), false, false, false},
    {NAMES("ufakzeka"), steps_ufakzeka, N(steps_ufakzeka), false, false, false},
};

/* ---- compiled form ------------------------------------------------------- */

struct pretok {
    const struct pre_def *def;
    pcre2_code **code; /* one per step */
    bool *jit;         /* JIT compile succeeded */
};

struct pretok_scratch {
    const struct pretok *p;
    pcre2_match_data **md; /* one per step: steps recurse into each other */
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;

    /* the decoded text of the current run */
    const char *text;
    size_t n;       /* code points */
    uint32_t *cp;   /* n */
    uint8_t *fl;    /* n, unicode flags */
    size_t *off;    /* n + 1 byte offsets; unused when ascii */
    bool ascii;
    size_t cap;

    bool reference;
    pretok_piece_fn fn;
    void *ud;
};

/* White_Space, as the contents of a character class (see pretok.h). */
#define WS_CLASS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Rewrites \s and \S to the explicit White_Space class.  Returns a malloc'd
 * string or NULL (allocation failure, or \S inside a class, which no table
 * entry uses). */
static char *rewrite_regex(const char *re) {
    size_t n = strlen(re), ws = strlen(WS_CLASS);
    size_t cap = n * (ws + 4) + 1; /* worst case: every char a \s */
    char *out = malloc(cap);
    if (!out) return NULL;
    size_t o = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = re[i];
        if (c == '\\' && i + 1 < n) {
            char d = re[i + 1];
            if (d == 's' || d == 'S') {
                if (d == 'S' && in_class) {
                    free(out);
                    return NULL;
                }
                if (!in_class) out[o++] = '[';
                if (d == 'S') out[o++] = '^';
                memcpy(out + o, WS_CLASS, ws);
                o += ws;
                if (!in_class) out[o++] = ']';
            } else {
                out[o++] = c;
                out[o++] = d;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) in_class = true;
        else if (c == ']' && in_class) in_class = false;
        out[o++] = c;
    }
    out[o] = '\0';
    return out;
}

void pretok_destroy(struct pretok *p) {
    if (!p) return;
    if (p->code) {
        for (size_t i = 0; i < p->def->n_steps; i++) pcre2_code_free(p->code[i]);
    }
    free(p->code);
    free(p->jit);
    free(p);
}

enum dj_status pretok_create(const char *pre, struct pretok **out, struct pretok_opts *opts) {
    const struct pre_def *def = NULL;
    for (size_t i = 0; i < N(pre_defs) && !def; i++) {
        for (const char *const *nm = pre_defs[i].names; *nm; nm++) {
            if (strcmp(*nm, pre) == 0) {
                def = &pre_defs[i];
                break;
            }
        }
    }
    if (!def) return dj_fail(DJ_ERR_UNSUPPORTED, "unknown pre-tokenizer type '%s' (tokenizer.ggml.pre)", pre);

    struct pretok *p = calloc(1, sizeof *p);
    if (!p) return dj_fail(DJ_ERR_NOMEM, "out of memory compiling the '%s' pre-tokenizer", pre);
    p->def = def;
    p->code = calloc(def->n_steps, sizeof *p->code);
    p->jit = calloc(def->n_steps, sizeof *p->jit);
    if (!p->code || !p->jit) {
        pretok_destroy(p);
        return dj_fail(DJ_ERR_NOMEM, "out of memory compiling the '%s' pre-tokenizer", pre);
    }
    for (size_t i = 0; i < def->n_steps; i++) {
        char *re = rewrite_regex(def->steps[i].regex);
        if (!re) {
            pretok_destroy(p);
            return dj_fail(DJ_ERR_NOMEM, "out of memory compiling the '%s' pre-tokenizer", pre);
        }
        int err;
        PCRE2_SIZE err_off;
        p->code[i] = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &err,
                                   &err_off, NULL);
        free(re);
        if (!p->code[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            pretok_destroy(p);
            /* our own table is wrong: not the file's fault */
            return dj_fail(DJ_ERR_UNSUPPORTED, "pre-tokenizer '%s': regex %zu does not compile at offset %zu: %s", pre,
                           i, (size_t)err_off, (const char *)msg);
        }
        p->jit[i] = pcre2_jit_compile(p->code[i], PCRE2_JIT_COMPLETE) == 0;
    }
    opts->ignore_merges = def->ignore_merges;
    opts->add_bos = def->add_bos;
    opts->bos_none = def->bos_none;
    *out = p;
    return DJ_OK;
}

size_t pretok_n_steps(const struct pretok *p) { return p->def->n_steps; }

bool pretok_step_is_fast(const struct pretok *p, size_t i) {
    return i < p->def->n_steps && p->def->steps[i].kind != STEP_REGEX;
}

struct pretok_scratch *pretok_scratch_create(const struct pretok *p) {
    struct pretok_scratch *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = p;
    /* match data and the JIT stack are made when a regex step first runs:
     * the hand-written splitters need neither, and short texts are common */
    s->md = calloc(p->def->n_steps, sizeof *s->md);
    if (!s->md) {
        free(s);
        return NULL;
    }
    return s;
}

void pretok_scratch_destroy(struct pretok_scratch *s) {
    if (!s) return;
    if (s->md) {
        for (size_t i = 0; i < s->p->def->n_steps; i++) pcre2_match_data_free(s->md[i]); /* accepts NULL */
    }
    free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jstack);
    free(s->cp);
    free(s->fl);
    free(s->off);
    free(s);
}

/* ---- the splitters ------------------------------------------------------- */

static enum dj_status run_step(struct pretok_scratch *s, size_t step, size_t b, size_t e);

static inline size_t byte_of(const struct pretok_scratch *s, size_t i) { return s->ascii ? i : s->off[i]; }

/* The code point index of byte offset `byte`, which starts a code point in [lo, hi]. */
static size_t cp_of_byte(const struct pretok_scratch *s, size_t byte, size_t lo, size_t hi) {
    if (s->ascii) return byte;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->off[mid] < byte) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static inline bool f_letter(uint8_t f) { return (f & UCLASS_MASK) == UCLASS_L; }
static inline bool f_number(uint8_t f) { return (f & UCLASS_MASK) == UCLASS_N; }
static inline bool f_space(uint8_t f) { return (f & UFLAG_SPACE) != 0; }

/* Emits [*prev, pos) to the next step if not empty and moves *prev to pos. */
#define EMIT_TO(pos_)                                                                                              \
    do {                                                                                                           \
        size_t pos__ = (pos_);                                                                                     \
        if (pos__ > prev) {                                                                                        \
            enum dj_status st__ = run_step(s, step + 1, prev, pos__);                                              \
            if (st__ != DJ_OK) return st__;                                                                        \
        }                                                                                                          \
        prev = pos__;                                                                                              \
    } while (0)

/* llama.cpp's unicode_regex_split_custom_gpt2, on code points [b, e). */
static enum dj_status split_gpt2(struct pretok_scratch *s, size_t step, size_t b, size_t e) {
    const uint32_t *cp = s->cp;
    const uint8_t *fl = s->fl;
    size_t pos = b, prev = b;
    while (pos < e) {
        uint32_t c = cp[pos];
        if (c == '\'' && pos + 1 < e) {
            uint32_t c1 = cp[pos + 1];
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                EMIT_TO(pos += 2);
                continue;
            }
            if (pos + 2 < e) {
                uint32_t c2 = cp[pos + 2];
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    EMIT_TO(pos += 3);
                    continue;
                }
            }
        }
        /* ' ?X+': the class that decides is the one after an optional space */
        size_t q = pos + (c == ' ');
        uint8_t f2 = q < e ? fl[q] : 0;
        if (q < e && f_letter(f2)) {
            pos = q + 1;
            while (pos < e && f_letter(fl[pos])) pos++;
            EMIT_TO(pos);
            continue;
        }
        if (q < e && f_number(f2)) {
            pos = q + 1;
            while (pos < e && f_number(fl[pos])) pos++;
            EMIT_TO(pos);
            continue;
        }
        if (q < e && !f_space(f2)) { /* [^\s\p{L}\p{N}]+ */
            pos = q + 1;
            while (pos < e && !f_space(fl[pos]) && !f_letter(fl[pos]) && !f_number(fl[pos])) pos++;
            EMIT_TO(pos);
            continue;
        }
        size_t nws = 0;
        while (pos + nws < e && f_space(fl[pos + nws])) nws++;
        if (nws > 1 && pos + nws < e) { /* \s+(?!\S): leave the last space to the next word */
            EMIT_TO(pos += nws - 1);
            continue;
        }
        if (nws > 0) {
            EMIT_TO(pos += nws);
            continue;
        }
        EMIT_TO(++pos); /* unreachable: every code point matches one branch */
    }
    return DJ_OK;
}

static inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* llama.cpp's unicode_regex_split_custom_llama3 with \p{N}{1,max_digits}. */
static enum dj_status split_llama3(struct pretok_scratch *s, size_t step, size_t b, size_t e, size_t max_digits) {
    const uint32_t *cp = s->cp;
    const uint8_t *fl = s->fl;
    size_t pos = b, prev = b;
    while (pos < e) {
        uint32_t c = cp[pos];
        uint8_t f = fl[pos];
        /* (?i:'s|'t|'re|'ve|'m|'ll|'d); only ASCII letters lower-case to these */
        if (c == '\'' && pos + 1 < e) {
            uint32_t c1 = ascii_lower(cp[pos + 1]);
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                EMIT_TO(pos += 2);
                continue;
            }
            if (pos + 2 < e) {
                uint32_t c2 = ascii_lower(cp[pos + 2]);
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    EMIT_TO(pos += 3);
                    continue;
                }
            }
        }
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!(c == '\r' || c == '\n' || f_number(f))) {
            if (f_letter(f) || (pos + 1 < e && f_letter(fl[pos + 1]))) {
                pos++;
                while (pos < e && f_letter(fl[pos])) pos++;
                EMIT_TO(pos);
                continue;
            }
        }
        /* \p{N}{1,max} */
        if (f_number(f)) {
            size_t ini = pos;
            while (pos < e && f_number(fl[pos])) {
                if (++pos - ini >= max_digits) {
                    EMIT_TO(pos);
                    ini = pos;
                }
            }
            EMIT_TO(pos);
            continue;
        }
        /*  ?[^\s\p{L}\p{N}]+[\r\n]*  (llama.cpp tests the class after the
         * optional space, which is "none" past the end: a lone trailing space
         * lands here and is emitted alone, as \s+ would) */
        size_t q = pos + (c == ' ');
        uint8_t f2 = q < e ? fl[q] : 0;
        if (!f_space(f2) && !f_letter(f2) && !f_number(f2)) {
            pos = q;
            while (pos < e && !f_space(fl[pos]) && !f_letter(fl[pos]) && !f_number(fl[pos])) pos++;
            while (pos < e && (cp[pos] == '\r' || cp[pos] == '\n')) pos++;
            EMIT_TO(pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (pos + nws < e && f_space(fl[pos + nws])) {
            uint32_t c2 = cp[pos + nws];
            if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { /* \s*[\r\n]+ */
            EMIT_TO(pos = last_rn);
            continue;
        }
        if (nws > 1 && pos + nws < e) { /* \s+(?!\S) */
            EMIT_TO(pos += nws - 1);
            continue;
        }
        if (nws > 0) { /* \s+ */
            EMIT_TO(pos += nws);
            continue;
        }
        EMIT_TO(++pos);
    }
    return DJ_OK;
}

static inline bool in_simple_class(const struct pretok_scratch *s, uint8_t cls, size_t i) {
    uint32_t c = s->cp[i];
    uint8_t f = s->fl[i];
    switch (cls) {
    case SC_CRLF: return c == '\r' || c == '\n';
    case SC_L: return f_letter(f);
    case SC_P: return (f & UCLASS_MASK) == UCLASS_P;
    case SC_N: return f_number(f);
    case SC_CJK: return ((c >= 0x800 && c <= 0x9fa5) || (c >= 0xac00 && c <= 0xd7ff)) && !f_space(f);
    case SC_DIGIT: return c >= '0' && c <= '9';
    case SC_P_FALCON:
        return (f & UCLASS_MASK) == UCLASS_P || (c < 128 && c && strchr("$+<=>^~|`", (int)c) != NULL);
    case SC_P_DEFAULT:
        return (f & UCLASS_MASK) == UCLASS_P || (c < 128 && c && strchr("$+<=>^~|", (int)c) != NULL);
    }
    return false;
}

/* \s?C+ / C+ / C / CCC: matches and the gaps between them become pieces. */
static enum dj_status split_simple(struct pretok_scratch *s, size_t step, size_t b, size_t e,
                                   const struct step_def *d) {
    size_t pos = b, prev = b;
    while (pos < e) {
        size_t ms, body;
        if (d->opt_ws && f_space(s->fl[pos]) && pos + 1 < e && in_simple_class(s, d->cls, pos + 1)) {
            ms = pos;
            body = pos + 1;
        } else if (in_simple_class(s, d->cls, pos)) {
            ms = body = pos;
        } else {
            pos++;
            continue;
        }
        size_t me = body + 1;
        if (d->mode == SM_PLUS) {
            while (me < e && in_simple_class(s, d->cls, me)) me++;
        } else if (d->mode == SM_THREE) {
            if (!(body + 2 < e && in_simple_class(s, d->cls, body + 1) && in_simple_class(s, d->cls, body + 2))) {
                pos++;
                continue;
            }
            me = body + 3;
        }
        EMIT_TO(ms); /* the gap */
        EMIT_TO(me); /* the match */
        pos = me;
    }
    EMIT_TO(e);
    return DJ_OK;
}

/* PCRE2: matches of regex `step` in the piece, and the gaps between them. */
static enum dj_status split_regex(struct pretok_scratch *s, size_t step, size_t b, size_t e) {
    const struct pretok *p = s->p;
    pcre2_code *code = p->code[step];
    if (!s->md[step]) {
        s->md[step] = pcre2_match_data_create_from_pattern(code, NULL);
        if (!s->md[step]) return dj_fail(DJ_ERR_NOMEM, "pre-tokenizer: out of memory");
    }
    pcre2_match_data *md = s->md[step];
    size_t base = byte_of(s, b);
    PCRE2_SPTR subj = (PCRE2_SPTR)(s->text + base);
    size_t len = byte_of(s, e) - base;
    size_t off = 0, last = 0; /* byte offsets within the piece */
    size_t prev = b;
    while (off < len) {
        int rc = p->jit[step] ? pcre2_jit_match(code, subj, len, off, 0, md, s->mctx)
                              : pcre2_match(code, subj, len, off, PCRE2_NO_UTF_CHECK, md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !s->jstack) {
            /* deep patterns (tekken's lookahead groups) on long pieces need
             * more than the default 32 KiB JIT stack: retry with 4 MiB */
            s->mctx = pcre2_match_context_create(NULL);
            s->jstack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
            if (!s->mctx || !s->jstack) return dj_fail(DJ_ERR_NOMEM, "pre-tokenizer: out of memory");
            pcre2_jit_stack_assign(s->mctx, NULL, s->jstack);
            continue;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return dj_fail(DJ_ERR_UNSUPPORTED, "pre-tokenizer regex %zu failed on a %zu-byte piece: %s", step, len,
                           (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: contributes nothing; step over one code point */
            off = ms + (ms < len ? utf8_len_from_lead(subj[ms]) : 1);
            continue;
        }
        if (ms > last) EMIT_TO(cp_of_byte(s, base + ms, prev, e)); /* the gap */
        EMIT_TO(cp_of_byte(s, base + me, prev, e));                /* the match */
        last = off = me;
    }
    EMIT_TO(e);
    return DJ_OK;
}

static enum dj_status run_step(struct pretok_scratch *s, size_t step, size_t b, size_t e) {
    const struct pre_def *def = s->p->def;
    if (step == def->n_steps) return s->fn(s->ud, byte_of(s, b), byte_of(s, e));
    const struct step_def *d = &def->steps[step];
    if (s->reference) return split_regex(s, step, b, e);
    switch (d->kind) {
    case STEP_GPT2: return split_gpt2(s, step, b, e);
    case STEP_LLAMA3: return split_llama3(s, step, b, e, 3);
    case STEP_QWEN2: return split_llama3(s, step, b, e, 1);
    case STEP_SIMPLE: return split_simple(s, step, b, e, d);
    default: return split_regex(s, step, b, e);
    }
}

/* Decodes text into s->cp / s->fl (and s->off unless it is all ASCII). */
static enum dj_status decode_text(struct pretok_scratch *s, const char *text, size_t len) {
    if (len > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < len) {
            if (dj_mul_overflow(cap, 2, &cap)) return dj_fail(DJ_ERR_NOMEM, "pre-tokenizer: text too long");
        }
        size_t n_off;
        if (dj_add_overflow(cap, 1, &n_off)) return dj_fail(DJ_ERR_NOMEM, "pre-tokenizer: text too long");
        uint32_t *cp = realloc(s->cp, cap * sizeof *cp);
        if (cp) s->cp = cp;
        uint8_t *fl = realloc(s->fl, cap);
        if (fl) s->fl = fl;
        size_t *off = NULL;
        size_t off_bytes;
        if (!dj_mul_overflow(n_off, sizeof *off, &off_bytes)) off = realloc(s->off, off_bytes);
        if (off) s->off = off;
        if (!cp || !fl || !off) return dj_fail(DJ_ERR_NOMEM, "pre-tokenizer: out of memory for %zu bytes", len);
        s->cap = cap;
    }
    const unsigned char *u = (const unsigned char *)text;
    bool ascii = true;
    for (size_t i = 0; i < len; i++) {
        if (u[i] >= 0x80) {
            ascii = false;
            break;
        }
    }
    s->ascii = ascii;
    s->text = text;
    if (ascii) {
        for (size_t i = 0; i < len; i++) {
            s->cp[i] = u[i];
            s->fl[i] = unicode_ascii_flags[u[i]];
        }
        s->n = len;
        return DJ_OK;
    }
    size_t n = 0, i = 0;
    while (i < len) {
        size_t l = 1;
        uint32_t c = u[i] < 0x80 ? u[i] : utf8_decode_lenient(u + i, len - i, &l);
        s->cp[n] = c;
        s->fl[n] = unicode_flags(c);
        s->off[n] = i;
        n++;
        i += l;
    }
    s->off[n] = len;
    s->n = n;
    return DJ_OK;
}

enum dj_status pretok_run(const struct pretok *p, struct pretok_scratch *s, const char *text, size_t len,
                          bool reference, pretok_piece_fn fn, void *ud) {
    DJ_ASSERT(s->p == p);
    if (len == 0) return DJ_OK;
    enum dj_status st = decode_text(s, text, len);
    if (st != DJ_OK) return st;
    s->reference = reference;
    s->fn = fn;
    s->ud = ud;
    return run_step(s, 0, 0, s->n);
}
