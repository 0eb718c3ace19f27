/*
 * grammar.h — GBNF grammars: the parser, the code-point matcher, and the
 * per-vocabulary token masks that constrain sampling (structured output).
 *
 *   GBNF text --grammar_parse--> struct dj_grammar (immutable IR, shareable)
 *                                  |
 *   struct dj_gmatch  (a matcher state: set of stacks + partial UTF-8)
 *        gmatch_accept_bytes / gmatch_can_end / gmatch_forced_bytes
 *                                  |
 *   struct dj_gvocab  (a vocabulary's token bytes, sorted; per vocabulary)
 *   struct dj_gtok    (grammar x vocabulary: cached masks; per grammar)
 *        gtok_mask(state) -> bitset over the vocabulary; gtok_accept(state, token)
 *
 * The IR follows llama.cpp's (src/llama-grammar.h) so its grammars mean the
 * same thing here: a rule is a list of alternatives, each a sequence of
 * elements; an alternative ends at DJ_GE_ALT (another follows) or DJ_GE_END
 * (the rule's last).  A character set is one DJ_GE_CHAR / DJ_GE_CHAR_NOT
 * element followed by any number of DJ_GE_CHAR_ALT (another code point) and
 * DJ_GE_CHAR_RNG_UPPER (turns the code point before it into a range ending
 * here, inclusive).  Repetitions (* + ? {m,n}) and groups are rewritten into
 * generated rules by the parser, as llama.cpp does (names "<rule>-<n>").
 *
 * Threading: a dj_grammar and a dj_gvocab are immutable after creation and
 * may be shared by threads; a dj_gtok caches masks as it goes and must be
 * used by one thread at a time (the engine thread); a dj_gmatch belongs to
 * one request.
 */
#ifndef DJ_SAMPLE_GRAMMAR_H
#define DJ_SAMPLE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deja.h"
#include "core/status.h"

struct dj_vocab;

enum dj_gelem_type {
    DJ_GE_END = 0,        /* end of the rule */
    DJ_GE_ALT,            /* end of this alternative; another follows */
    DJ_GE_RULE_REF,       /* value: rule index */
    DJ_GE_CHAR,           /* value: code point; starts a character set */
    DJ_GE_CHAR_NOT,       /* value: code point; starts a negated set [^...] */
    DJ_GE_CHAR_RNG_UPPER, /* value: upper bound of a range whose lower bound is the element before */
    DJ_GE_CHAR_ALT,       /* value: one more code point of the set */
    DJ_GE_CHAR_ANY,       /* `.`: any code point */
    DJ_GE_TOKEN,          /* value: a token id (`<[id]>` or `<name>`): matched only by that token */
    DJ_GE_TOKEN_NOT,      /* value: a token id (`!<[id]>`): any one token but that one */
};

struct dj_gelem {
    uint32_t type;  /* enum dj_gelem_type */
    uint32_t value;
};

struct dj_grammar {
    struct dj_gelem *elems; /* every rule's elements, rule after rule */
    size_t n_elems;
    size_t *rule_start;     /* n_rules: index of the rule's first element in elems */
    char **rule_names;      /* n_rules: names as written, generated ones "<parent>-<n>" */
    size_t n_rules;
    size_t root;            /* the start rule */
    bool has_tokens;        /* some rule uses DJ_GE_TOKEN / DJ_GE_TOKEN_NOT (needs a vocabulary) */
};

/* Parses GBNF text (llama.cpp's syntax: `name ::= ...`, alternation `|`,
 * grouping `( )`, `*` `+` `?` `{m}` `{m,}` `{m,n}`, string literals with
 * escapes, character classes `[a-z]` `[^"\\]`, `.`, `\xHH` `\uHHHH`
 * `\UHHHHHHHH` `\t\n\r\\\"\[\]`, `#` comments, token references `<[123]>`
 * and `<name>` (resolved against vocab; NULL vocab: `<name>` is an error)).
 * root: the start rule's name (NULL: "root").
 * Errors (DJ_ERR_FORMAT, message "grammar: line L, column C: expected X"):
 * syntax errors, an undefined rule (named, with where it is used), a missing
 * root, left recursion (the rules in the cycle named), empty input,
 * out-of-range code points, repetition bounds over 1000 or m > n.  Never
 * aborts, whatever the input. */
enum dj_status grammar_parse(const char *src, size_t n, const char *root, const struct dj_vocab *vocab,
                             struct dj_grammar **out);
void grammar_free(struct dj_grammar *g); /* accepts NULL */
/* The grammar as GBNF text again (one rule a line; generated rules included);
 * malloc'd, NUL-terminated; NULL on OOM.  Parsing it gives the same IR. */
char *grammar_to_gbnf(const struct dj_grammar *g);
/* Same IR: rules (names, starts, root), elements, has_tokens. */
bool grammar_equal(const struct dj_grammar *a, const struct dj_grammar *b);

/* ---- the matcher ---------------------------------------------------------- */

struct dj_gmatch;

/* A matcher at the start of g's root rule.  g must outlive it. */
enum dj_status gmatch_create(const struct dj_grammar *g, struct dj_gmatch **out);
struct dj_gmatch *gmatch_clone(const struct dj_gmatch *m); /* NULL on OOM */
void gmatch_free(struct dj_gmatch *m);                     /* accepts NULL */
/* Advances by the bytes s[0..n) (UTF-8; a code point may be split across
 * calls).  Returns false, leaving m unchanged, if no way through the
 * grammar accepts them; n == 0 returns true. */
bool gmatch_accept_bytes(struct dj_gmatch *m, const char *s, size_t n);
/* The input so far is a complete sentence of the grammar (and no code point
 * is half-read): generation may end here. */
bool gmatch_can_end(const struct dj_gmatch *m);
/* The input can go on (some continuation is allowed). */
bool gmatch_can_continue(const struct dj_gmatch *m);
/* The longest byte string every continuation must start with: stops where
 * two code points are allowed, where the input could end, or at cap bytes.
 * Writes up to cap bytes into buf, returns the count. */
size_t gmatch_forced_bytes(const struct dj_gmatch *m, char *buf, size_t cap);
/* The code points allowed next, as sorted, disjoint, inclusive ranges: pairs
 * out[2i] = lo, out[2i+1] = hi for i < min(result, cap_pairs).  Returns the
 * number of ranges (more than cap_pairs: only cap_pairs written).  Token
 * elements (DJ_GE_TOKEN*) are not code points and are not listed. */
size_t gmatch_next_ranges(const struct dj_gmatch *m, uint32_t *out, size_t cap_pairs);
/* Whole-string check: s[0..n) is a sentence of g. */
bool grammar_match(const struct dj_grammar *g, const char *s, size_t n);

/* ---- token masks ------------------------------------------------------------ */

struct dj_gvocab;
struct dj_gtok;

/* A vocabulary's token pieces prepared for masking (sorted, with common-prefix
 * lengths).  Control tokens never match grammar text; end-of-generation tokens
 * are allowed exactly where gmatch_can_end; user-defined tokens match their
 * text.  v must outlive it. */
enum dj_status gvocab_create(const struct dj_vocab *v, struct dj_gvocab **out);
void gvocab_free(struct dj_gvocab *gv);
size_t gvocab_n_tokens(const struct dj_gvocab *gv);

/* Grammar x vocabulary: where masks are computed and cached.  g and gv must
 * outlive it. */
enum dj_status gtok_create(const struct dj_grammar *g, const struct dj_gvocab *gv, struct dj_gtok **out);
void gtok_free(struct dj_gtok *t);
/* The allowed tokens in state m: bit t of mask (mask[t / 64] >> (t % 64) & 1)
 * is set when token t may come next.  mask holds (n_vocab + 63) / 64 words.
 * Returns the number of allowed tokens. */
size_t gtok_mask(struct dj_gtok *t, const struct dj_gmatch *m, uint64_t *mask);
/* Advances m by token tok; false (m unchanged) when the grammar forbids it. */
bool gtok_accept(struct dj_gtok *t, struct dj_gmatch *m, dj_token tok);
/* Counters for benchmarks and tests. */
struct dj_gtok_stats {
    uint64_t n_mask;        /* gtok_mask calls */
    uint64_t n_mask_cached; /* answered from the state cache */
    uint64_t n_checked;     /* tokens checked against a full stack (context-dependent) */
};
void gtok_get_stats(const struct dj_gtok *t, struct dj_gtok_stats *out);

#endif
