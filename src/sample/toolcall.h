/*
 * toolcall.h — grammars that make a model call tools: OpenAI-style `tools`
 * (a JSON array of {"type": "function", "function": {"name", "description",
 * "parameters"}}) and `tool_choice` / `parallel_tool_calls` in, GBNF out.
 * Each function's arguments follow its `parameters` schema
 * (json_schema.h; rules named "<function>-args..." so tools never collide).
 *
 * Formats (what the model writes for one call):
 *   HERMES  <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
 *           (Qwen 2.5 / Hermes / ChatML, as the replies in ../shared/traces:
 *           json.dumps separators ", " and ": " with the default whitespace);
 *           several calls are separated by one "\n".
 *   JSON    {"name": "NAME", "arguments": {...}}; several: a JSON array of them.
 *
 * Modes (tool_choice):
 *   NONE      no grammar: every field of the result is NULL.
 *   REQUIRED  the reply is tool calls only (one, or with parallel one or more).
 *   NAMED     like REQUIRED with only the function opts.name.
 *   AUTO      free text, then optionally tool calls (and nothing after them).
 *             The free text cannot contain the trigger (below), so a reply
 *             has one reading.
 *
 * The result, struct dj_toolcall_grammar (all malloc'd, freed by
 * toolcall_grammar_free):
 *   gbnf       root matches the whole reply, from its first byte.
 *   trigger    the text that starts the tool calls: "<tool_call>" (HERMES),
 *              "{" (JSON, one call) or "[" (JSON, parallel).
 *   lazy_gbnf  root matches what follows the first occurrence of trigger to
 *              the end of the reply: the rest of the first call and any
 *              further calls.  For AUTO the engine generates freely until
 *              the trigger appears in the output, then constrains the rest
 *              with lazy_gbnf (the trigger text itself is not re-matched).
 *              For REQUIRED / NAMED, gbnf applies from the start; the lazy
 *              pair is set too, for engines that let a model think before its
 *              calls.
 *
 * Errors (DJ_ERR_INVALID, "tools: ..."): not an array, a tool without a
 * function name, duplicate names, NAMED with an unknown name, no tools for
 * REQUIRED/NAMED/AUTO, and any json_schema error (prefixed with the tool's
 * name: "tools: bash: json schema: ...").  Never aborts.
 */
#ifndef DJ_SAMPLE_TOOLCALL_H
#define DJ_SAMPLE_TOOLCALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "sample/json_schema.h"

enum dj_tool_choice { DJ_TOOL_AUTO = 0, DJ_TOOL_REQUIRED, DJ_TOOL_NAMED, DJ_TOOL_NONE };
enum dj_tool_format { DJ_TOOL_FORMAT_HERMES = 0, DJ_TOOL_FORMAT_JSON };

struct dj_toolcall_opts {
    enum dj_tool_choice choice;
    const char *name;                  /* DJ_TOOL_NAMED: the function to call */
    bool parallel;                     /* parallel_tool_calls: one or more calls; false: exactly one */
    enum dj_tool_format format;
    struct dj_json_schema_opts schema; /* whitespace, strict...; root_name and rule_prefix are not used */
};

/* auto, parallel, hermes, json.dumps whitespace (DJ_JSON_WS_SPACED), not strict. */
struct dj_toolcall_opts toolcall_default_opts(void);

struct dj_toolcall_grammar {
    char *gbnf;
    char *trigger;
    char *lazy_gbnf;
};

enum dj_status toolcall_grammar_build(const char *tools_json, size_t n, const struct dj_toolcall_opts *opts,
                                      struct dj_toolcall_grammar *out);
enum dj_status toolcall_grammar_build_value(json_t *tools, const struct dj_toolcall_opts *opts,
                                            struct dj_toolcall_grammar *out);
void toolcall_grammar_free(struct dj_toolcall_grammar *g); /* accepts NULL and a zeroed struct */

#endif
