/*
 * json_schema.h — JSON Schema to GBNF: the grammar whose sentences are JSON
 * texts of values valid under the schema (structured output, tool calls).
 *
 *   schema (JSON text or jansson value)
 *      --json_schema_to_gbnf-->  GBNF text (llama.cpp syntax, grammar.h parses it)
 *
 * What "exactly" means here: every text the grammar accepts is a JSON value
 * valid under the schema, and every valid value has at least one spelling the
 * grammar accepts.  The grammar fixes the spelling where JSON allows several:
 * object members in the order `properties` lists them (additional members
 * after them), integers without fraction or exponent and never "-0" under a
 * range, bounded numbers without exponent, strings produced for `pattern`/`format`/`enum` in canonical escapes
 * (a character any code point may take keeps every escape), whitespace as opts.whitespace says.
 *
 * Supported (draft 2020-12 meaning, with draft 4-7 spellings where noted):
 *   type (string or array; "integer", "number", "string", "boolean", "null",
 *   "object", "array"), enum, const (combined with `type` only), properties,
 *   required, additionalProperties (false / true / schema; absent = true, or
 *   false with opts.strict), items (schema, or array = draft-4 tuple),
 *   prefixItems, additionalItems (with an items array), minItems, maxItems,
 *   minLength, maxLength (code points), pattern (regex subset, below), format
 *   (date, time, date-time, uuid, email, hostname, ipv4, ipv6, uri,
 *   uri-reference; others are an error unless opts.ignore_unknown_formats),
 *   any combination of these string keywords (pattern with minLength /
 *   maxLength, pattern with format, several patterns or formats from allOf,
 *   format with lengths: exactly the intersection, see "Strings" below),
 *   minimum / maximum / exclusiveMinimum /
 *   exclusiveMaximum on integers (exact, any int64 bounds; draft-4 boolean
 *   exclusive* too) and on numbers when the bounds are integral (exact:
 *   integer part by digit ranges, the fraction free, zero or non-zero at the
 *   bounds), anyOf, oneOf (as anyOf: a grammar cannot enforce that
 *   exactly one branch matches), allOf (merged into one schema; siblings of
 *   anyOf/oneOf/$ref are merged into each branch the same way), $ref to local
 *   JSON pointers ("#", "#/$defs/X", "#/definitions/X", any "#/a/b"),
 *   recursion through refs, boolean schemas, uniqueItems: false,
 *   minProperties / maxProperties when the required / declared properties
 *   already imply them, propertyNames that every string satisfies (true,
 *   {"type": "string"}: zod's records).  Ignored annotations: description, title, examples,
 *   default, $schema, $id, $comment, deprecated, readOnly, writeOnly,
 *   contentEncoding, contentMediaType, $defs / definitions (only as ref
 *   targets).
 *
 * Regex subset for `pattern` (ECMA-262 meaning, search semantics: an
 * unanchored branch may have any text around it): literals, escapes \d \D \w
 * \W \s \S \t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation, classes
 * [..] [^..] with ranges and those escapes, `.` (not \n \r U+2028 U+2029),
 * groups ( ), (?: ), (?<name> ), alternation, * + ? {m} {m,} {m,n} (lazy `?`
 * suffix accepted: same language), ^ only at the start of a top-level branch
 * and $ only at its end.  Anything else (backreferences, lookaround, \b, \B,
 * \cX, \p{..}) is an error naming the construct.  A class that matches no
 * character and an unbounded repetition of something that can be empty are
 * errors too (the second would make a GBNF loop).
 *
 * Strings (schema_regex.h, schema_dfa.c): a string with one pattern or one
 * format and no length bound is the regex written as GBNF; with no regex,
 * `char{m,n}` (cheap at any bound: maxLength 524288 is a few rules).  Several
 * constraints together are intersected exactly: `^[set]{m,n}$`-shaped
 * patterns fold into a character set and the length bounds; lengths that the
 * one remaining regex implies anyway are dropped; otherwise each regex
 * becomes a minimal DFA over code points, the DFAs are multiplied, and the
 * result is multiplied with a length counter (counting only where a bound
 * can still matter; a final state that only loops becomes one counted
 * repetition, so `^wf_[a-z0-9-]{6,}$` with maxLength 524288 is about ten rules).
 * Limits, past which the schema is refused with the constraints and the JSON
 * pointer in the message: 4096 states for any one automaton, 8192 rules (one
 * per automaton state and counted length: format "uri" with a maxLength
 * over 55 is refused), 4 MB of their text.  An intersection that no string
 * satisfies is an error ("no string satisfies pattern '^abc$', minLength 4").
 *
 * Formats are regexes in that subset (schema_regex.c): date (leap years
 * exact), time and date-time (RFC 3339), uuid (any hex case), ipv4 (dotted
 * decimal, no leading zeros), ipv6 (RFC 3986 IPv6address: every "::" form,
 * an IPv4 tail, no zone), hostname (RFC 1123 labels of 1-63 letters, digits
 * and hyphens, no hyphen at a label's ends, no trailing dot), email (RFC 5321
 * dot-atom "@" letter-digit-hyphen labels: no quoted local part, no address
 * literal), uri (RFC 3986 URI: scheme ":" hier-part, query, fragment; IP
 * literals, IPvFuture, percent-encodings; ASCII only, as the RFC) and
 * uri-reference (URI or relative-ref).
 *
 * Not supported (DJ_ERR_INVALID naming the keyword and its JSON pointer,
 * "json schema: unsupported keyword 'patternProperties' at /properties/foo"):
 * patternProperties, propertyNames that constrain keys, dependentRequired/Schemas, contains,
 * uniqueItems: true, multipleOf, if/then/else, not, unevaluated*, $anchor,
 * $dynamicRef, remote refs; fractional bounds on type "number"; enum/const
 * with keywords other than type; allOf components with different
 * prefixItems / tuple items; formats other than those above (unless
 * opts.ignore_unknown_formats).
 *
 * Known gaps where the grammar is looser or stricter than the schema (a CFG
 * cannot do better or it was not worth it): duplicate keys among additional
 * properties are not excluded (declared names are, in any spelling: keys
 * close to a declared name must use canonical escapes); format "time"/"date-time" accept
 * seconds 00-59 (no leap second 60) and upper-case T/Z only; "email" is the
 * dot-atom@hostname subset of RFC 5321 and "hostname" does not check the
 * 253-character total (both: lengths unchecked, looser).
 *
 * Errors never abort: the input may be anything (the fuzz target feeds bytes).
 * Nesting deeper than 64 schemas is an error, and so is a grammar past the
 * limits that bound conversion in time and memory (json_schema.c says why
 * each): an enum of over 1024 values, over 10000 schemas converted into one
 * grammar (a builder's), over 4 MB of rule text, string automata of over
 * 131072 states and plan nodes in all; the message names the limit and the
 * JSON pointer.  Owner of every returned string:
 * the caller (free()).  Out-params are set only on success.
 */
#ifndef DJ_SAMPLE_JSON_SCHEMA_H
#define DJ_SAMPLE_JSON_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

enum dj_json_ws {
    DJ_JSON_WS_COMPACT = 0, /* no whitespace at all: {"a":1,"b":[1,2]} (OpenAI strict mode) */
    DJ_JSON_WS_SPACED,      /* exactly ", " and ": " (Python json.dumps, the Hermes traces) */
    DJ_JSON_WS_FLEXIBLE,    /* 0..20 of [ \t\n] around every structural character */
};

struct dj_json_schema_opts {
    enum dj_json_ws whitespace;
    bool strict;                 /* an absent additionalProperties means false (OpenAI strict mode) */
    bool ignore_unknown_formats; /* an unknown `format` is an annotation instead of an error */
    const char *root_name;       /* the rule the whole value is; NULL: "root" (sub-rules: "root-...") */
    const char *rule_prefix;     /* names of $ref target rules: "<prefix>-<Name>"; NULL: the root name */
};

struct dj_json_schema_opts json_schema_default_opts(void);

/* schema_json[0..n): the schema's JSON text.  *gbnf_out: malloc'd GBNF, root
 * rule (opts->root_name) first.  opts NULL: the defaults. */
enum dj_status json_schema_to_gbnf(const char *schema_json, size_t n, const struct dj_json_schema_opts *opts,
                                   char **gbnf_out);
enum dj_status json_schema_to_gbnf_value(json_t *schema, const struct dj_json_schema_opts *opts, char **gbnf_out);

/* ---- composing several schemas into one grammar (tool calls) ---------------
 * A builder holds named rules; rules with the same name and the same body are
 * one rule, a clash gets a numbered name, so the names it returns are the ones
 * to use.  Shared primitives (string, value, ws, ...) are made once. */
struct dj_gbnf_builder;

enum dj_status gbnf_builder_create(const struct dj_json_schema_opts *opts, struct dj_gbnf_builder **out);
void gbnf_builder_free(struct dj_gbnf_builder *b); /* accepts NULL */
/* Adds `name ::= body`; returns the name used (owned by the builder), NULL on
 * OOM.  body NULL reserves a fresh name for gbnf_builder_define (rules that
 * refer to each other); finish fails while one is undefined. */
const char *gbnf_builder_add_rule(struct dj_gbnf_builder *b, const char *name, const char *body);
/* Sets the body of a reserved (or any) rule; false on OOM or an unknown name. */
bool gbnf_builder_define(struct dj_gbnf_builder *b, const char *name, const char *body);
/* Converts schema (refs relative to it) under rules named name, name-...;
 * *rule: the rule the value is (owned by the builder). */
enum dj_status gbnf_builder_add_schema(struct dj_gbnf_builder *b, json_t *schema, const char *name, const char **rule);
/* The GBNF expression for the structural character c ('{' '}' '[' ']' ',' ':')
 * with the builder's whitespace (owned by the builder; NULL for another c or OOM). */
const char *gbnf_builder_punct(struct dj_gbnf_builder *b, char c);
/* All rules as GBNF text, rule `root` first.  malloc'd. */
enum dj_status gbnf_builder_finish(struct dj_gbnf_builder *b, const char *root, char **gbnf_out);

/* s[0..n) as a GBNF string literal ("..." with escapes); malloc'd, NULL on OOM. */
char *gbnf_quote(const char *s, size_t n);
/* The canonical JSON encoding of string s[0..n) (quotes included, as Python's
 * json.dumps(ensure_ascii=False) writes it) as a GBNF literal.  malloc'd. */
char *gbnf_json_string_literal(const char *s, size_t n);
/* A rule name made of s's letters and digits, other runs as '-' (malloc'd). */
char *gbnf_sanitize_name(const char *s);

#endif
