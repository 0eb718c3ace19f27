/*
 * toolcall_int.h — what toolcall.c shares with toolcall_xml.c: string helpers
 * that report OOM through dj_fail, and the "text without these markers"
 * automaton.
 */
#ifndef DJ_SAMPLE_TOOLCALL_INT_H
#define DJ_SAMPLE_TOOLCALL_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "sample/json_schema.h"

#define TC_MAX_MARKER 64 /* code points of a marker the free text must avoid */
#define TC_MAX_PATS 4    /* markers avoided by one text automaton */

/* printf into malloc'd memory; NULL (message set) on OOM. */
char *tc_fmt(const char *f, ...) DJ_PRINTF(1, 2);
/* Appends s to *acc (malloc'd, may be NULL); false (message set) on OOM. */
bool tc_cat(char **acc, const char *s);
/* Adds the rule name ::= body and frees body; the name used, NULL on OOM or a NULL body. */
const char *tc_put(struct dj_gbnf_builder *b, const char *name, char *body);

/* Rules for "any text that contains none of pats[0..n_pats)" (an
 * Aho-Corasick automaton over code points, one rule a state, one character a
 * step), named "<prefix>-<i>".  no_first: ASCII characters the text may not
 * start with (NULL: none); then the start rule is an extra one.  states (if not NULL, TC_MAX_PATS * TC_MAX_MARKER + 1
 * entries) gets the state rules' names, state i for i <= the length of pats[0]
 * being pats[0]'s prefix of i code points.  *start: the start rule's name
 * (owned by the builder).  Errors: a marker empty or too long (INVALID), OOM. */
enum dj_status tc_text_rule(struct dj_gbnf_builder *b, const char *prefix, const char *const *pats, size_t n_pats,
                            const char *no_first, const char **states, const char **start);

/* How one XML-like family writes a parameter (toolcall_xml.c):
 *   key_open KEY key_close MID val_open VALUE val_close END
 * with MID and END GBNF expressions ("" for none). */
struct tc_xml_fmt {
    const char *what;                 /* "Qwen3-Coder XML", for messages */
    const char *key_open, *key_close; /* literals around the key */
    const char *key_forbid;           /* a key holding this cannot be read back (the parser reads the key up to it) */
    const char *mid_x;                /* expression between key_close and val_open */
    const char *val_open, *val_close; /* literals around the value */
    const char *val_end;              /* the marker the parser ends the value at (a string may not hold it; starts with '<') */
    const char *end_x;                /* expression after val_close */
};
extern const struct tc_xml_fmt tc_xml_qwen, tc_xml_glm;

/* The rule for the parameters of one call in format f (for Qwen3-Coder what
 * comes between "<function=NAME>\n" and "</function>"), for the parameters
 * schema params (NULL: none).  tool: the function's name, for messages.
 * *str_cache: NULL at first, then the raw-string rule made for b (shared by
 * every tool; one format per builder).  toolcall_xml.c. */
enum dj_status tc_xml_args(struct dj_gbnf_builder *b, const struct tc_xml_fmt *f, json_t *params, const char *tool,
                           const char *hint, const char **str_cache, const char **rule);

#endif
