/*
 * schema_regex.h — the regular languages behind JSON Schema strings (private
 * to src/sample): code point sets, the `pattern` regex subset parsed into a
 * tree, the `format` values written as such regexes, and finite automata
 * over code points for the cases a single regex cannot express (a pattern
 * with minLength/maxLength, several patterns from allOf, pattern with format):
 *
 *   pattern text --rx_parse--> struct rx_node tree --(json_schema.c)--> GBNF   one constraint
 *                                     |
 *                                     +--sdfa_from_rx--> DFA --minimize--> x DFA ... --sdfa_plan--> rules
 *                                                                 (product)        (length counter)
 *
 * Strings here are sequences of code points (what a JSON string decodes to);
 * surrogates U+D800..U+DFFF never occur in them (a JSON parser rejects lone
 * ones, and a pair decodes to one code point), so every set is taken
 * without them.  Lengths count code points, as minLength/maxLength do.
 *
 * The regex subset and its meaning are documented in json_schema.h; the
 * parser (schema_regex.c) adds the search semantics itself: an unanchored
 * side of a top-level alternative gets a "pad" node (any text), so the tree
 * is an ordinary regular expression whose language is exactly the set of
 * strings the pattern matches.  The automata are in schema_dfa.c.
 */
#ifndef DJ_SAMPLE_SCHEMA_REGEX_H
#define DJ_SAMPLE_SCHEMA_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define RX_INF SIZE_MAX      /* an unbounded count or length */
#define RX_MAX_COUNT 1000000 /* a {m,n} count past this is an error */
#define RX_MAX_DEPTH 64      /* groups nested deeper: an error */
#define RX_MAX_CP 0x10FFFF

/* ---- code point sets ---------------------------------------------------- */

struct cpset {
    uint32_t *r; /* pairs lo, hi; sorted and disjoint after cpset_norm */
    size_t n, cap;
    bool oom;
};

void cpset_add(struct cpset *s, uint32_t lo, uint32_t hi);
void cpset_norm(struct cpset *s);
void cpset_negate(struct cpset *s); /* over [0, 0x10FFFF]; s normalized */
bool cpset_has(const struct cpset *s, uint32_t c);
void cpset_free(struct cpset *s);
/* s := s without the surrogates (s normalized; stays normalized). */
void cpset_drop_surrogates(struct cpset *s);
/* Is s (normalized, without surrogates) every code point but the surrogates? */
bool cpset_is_all(const struct cpset *s);
/* s := s intersected with t (both normalized). */
void cpset_intersect(struct cpset *s, const struct cpset *t);

/* ---- the regex tree ----------------------------------------------------- */

enum rx_kind { RX_EMPTY, RX_SET, RX_CAT, RX_ALT, RX_REP };

struct rx_node {
    enum rx_kind kind;
    bool nullable;
    bool pad;              /* RX_REP: "any text" added by the search semantics (kid: the set of all characters) */
    size_t m, n;           /* RX_REP: {m,n}, n RX_INF for no upper bound */
    struct cpset set;      /* RX_SET: normalized, no surrogates, never empty */
    struct rx_node **kid;  /* RX_CAT, RX_ALT: n_kid >= 2 (RX_ALT: RX_EMPTY kids allowed); RX_REP: 1 */
    size_t n_kid;
};

/* Parses pattern cp[0..n) (code points).  *out: the tree (rx_free), whose
 * language is the set of strings the pattern matches (search semantics
 * included).  Errors: DJ_ERR_INVALID with err (n_err bytes) set to the
 * construct and its position, "backreferences are not supported (at
 * character 4)"; DJ_ERR_NOMEM.  dj_last_error() is not touched. */
enum dj_status rx_parse(const uint32_t *cp, size_t n, struct rx_node **out, char *err, size_t n_err);
void rx_free(struct rx_node *x); /* accepts NULL */
/* A new tree for "every character in s, any number of times" (the pattern
 * ^[s]*$), s copied (normalized, no surrogates).  NULL on OOM. */
struct rx_node *rx_star_of(const struct cpset *s);

/* The shortest and longest string of x's language (longest RX_INF when
 * unbounded).  Exact: every set in a tree is non-empty. */
size_t rx_min_len(const struct rx_node *x);
size_t rx_max_len(const struct rx_node *x);
/* Is x's language "strings of length m..n over the set s" (^[s]{m,n}$)?
 * Then *s points at x's set. */
bool rx_is_counted_set(const struct rx_node *x, const struct cpset **s, size_t *m, size_t *n);

/* ---- formats ------------------------------------------------------------ */

/* The anchored regex (in the subset above) whose language is the `format`
 * name, NULL for a format without one.  Static text. */
const char *rx_format_regex(const char *name);

/* ---- automata (schema_dfa.c) -------------------------------------------- */

/* The symbols: disjoint code point intervals, sorted; every set of the trees
 * an alphabet was built for is a union of symbols. */
struct rx_alphabet {
    uint32_t *lo, *hi;
    size_t n;
};

/* A deterministic automaton over an alphabet; state 0 is the start. */
struct sdfa {
    size_t n, k;     /* states, symbols */
    int32_t *delta;  /* n * k: the next state, -1 none */
    bool *acc;       /* n */
    size_t n_made;   /* states the construction made before minimizing (what it cost) */
};

/* The alphabet that splits every set of xs[0..n) into whole symbols.  NOMEM. */
enum dj_status rx_alphabet_build(struct rx_node *const *xs, size_t n, struct rx_alphabet *out);
void rx_alphabet_free(struct rx_alphabet *a);

/* Errors of the functions below: DJ_ERR_NOMEM, or DJ_ERR_UNSUPPORTED when an
 * automaton would need more than max_states states (or a table of more than
 * SDFA_MAX_CELLS entries, or more than SDFA_MAX_WORK steps).  dj_last_error()
 * is not touched: the caller says what it was building. */
#define SDFA_MAX_CELLS ((size_t)1 << 23)
#define SDFA_MAX_WORK ((size_t)1 << 26)

/* The minimal automaton of x's language over alphabet a. */
enum dj_status sdfa_from_rx(const struct rx_node *x, const struct rx_alphabet *a, size_t max_states, struct sdfa *out);
/* The minimal automaton of the intersection of x's and y's languages. */
enum dj_status sdfa_intersect(const struct sdfa *x, const struct sdfa *y, size_t max_states, struct sdfa *out);
/* d := the minimal automaton of its language, every state reachable and able
 * to reach acceptance; 0 states for the empty language. */
enum dj_status sdfa_minimize(struct sdfa *d);
void sdfa_free(struct sdfa *d); /* accepts a zeroed one */

/* ---- a plan of grammar rules: the language of d restricted to lengths m..n.
 *
 * A node is a rule: a STATE node is (state q, length so far l) with an edge
 * per group of symbols; a LOOP node stands for a state q of d that only loops
 * on itself (and accepts) reached at length l: its whole remainder is
 * "symbols of the loop, lo..hi times", written as one counted repetition
 * instead of one node per length (this keeps maxLength: 524288 after a
 * prefix cheap).  Lengths are counted only where they matter: not at all when
 * d's own lengths already lie within m..n, up to m only when there is no
 * maximum.  Every node can reach acceptance (dead ones are removed), so a
 * grammar made from the plan never lets a text in that cannot be finished. */
struct sdfa_pedge {
    uint32_t sym_lo, sym_hi; /* symbols sym_lo..sym_hi */
    uint32_t to;             /* node */
};
struct sdfa_pnode {
    bool loop;      /* LOOP node (else STATE) */
    bool acc;       /* STATE: the text may end here */
    uint32_t q;     /* d's state */
    size_t lo, hi;  /* LOOP: repetitions of the loop's symbols (hi RX_INF: unbounded; 0..0: nothing) */
    size_t e0, ne;  /* STATE: edges edge[e0 .. e0+ne), sorted by target */
};
struct sdfa_plan {
    size_t n;                 /* nodes, node 0 the start; 0: no text has a length in m..n */
    struct sdfa_pnode *node;
    struct sdfa_pedge *edge;
    size_t n_edge;
};

/* d: minimized (sdfa_minimize).  n RX_INF: no maximum.  UNSUPPORTED past max_nodes. */
enum dj_status sdfa_plan_build(const struct sdfa *d, size_t m, size_t n, size_t max_nodes, struct sdfa_plan *out);
void sdfa_plan_free(struct sdfa_plan *p);
/* The symbols state q of d loops on (a LOOP node's set), as code points. */
void sdfa_loop_set(const struct sdfa *d, const struct rx_alphabet *a, uint32_t q, struct cpset *out);

#endif
