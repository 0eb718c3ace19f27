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

/* The rule for the parameters of one Qwen3-Coder call (what comes between
 * "<function=NAME>\n" and "</function>"), for the parameters schema params
 * (NULL: none).  tool: the function's name, for messages.  *str_cache: NULL
 * at first, then the raw-string rule made for b (shared by every tool).
 * toolcall_xml.c. */
enum dj_status tc_xml_args(struct dj_gbnf_builder *b, json_t *params, const char *tool, const char *hint,
                           const char **str_cache, const char **rule);

#endif
