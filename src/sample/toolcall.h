/*
 * toolcall.h — grammars that make a model call tools: OpenAI-style `tools`
 * (a JSON array of {"type": "function", "function": {"name", "description",
 * "parameters"}}) and `tool_choice` / `parallel_tool_calls` in, GBNF out.
 * Each function's arguments follow its `parameters` schema
 * (json_schema.h; rules named "<function>-args..." so tools never collide).
 *
 * Formats (what the model writes; one per chat-template family whose calls
 * carry JSON arguments, the bytes as the family's template renders an
 * assistant tool call and as src/chat/toolparse.c reads it back; NAME is the
 * function's name, ARGS its arguments per `parameters`, "|" separates the
 * forms of one family, [..] is optional, "..." more calls):
 *   HERMES        <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>\n<tool_call>...
 *                 (Qwen 2.5/3, QwQ, Hermes, MiMo, Granite 4, Bielik, Reka)
 *   JSON          {"name": "NAME", "arguments": ARGS}; several: [{...}, {...}]
 *   LLAMA3        {"name": "NAME", "parameters": ARGS}          (one call: the templates refuse more)
 *   MISTRAL       [TOOL_CALLS]NAME[[CALL_ID]ID9][ARGS]ARGS[TOOL_CALLS]... (Small 3.2, Ministral 3)
 *                 | [TOOL_CALLS][{"name": "NAME", "arguments": ARGS[, "id": "ID9"]}, ...] (Nemo)
 *   DEEPSEEK_V3   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>\n...<｜tool▁calls▁end｜>
 *   DEEPSEEK_V31  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
 *   FUNCTIONARY_V31 <function=NAME>ARGS</function><function=...
 *   COMMAND_R     <|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "NAME", "parameters": ARGS},\n    ...\n]<|END_ACTION|>
 *   GRANITE       <|tool_call|>[{"name": "NAME", "arguments": ARGS}, ...]
 *   KIMI_K2       <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>ARGS<|tool_call_end|>...<|tool_calls_section_end|>
 *   SOLAR         <|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>ARGS<|tool_call:end|>...<|calls|>
 *   NEMOTRON      <TOOLCALL>[{"name": "NAME", "arguments": ARGS}, ...]</TOOLCALL>
 *   APRIEL        <tool_calls>[{"name": "NAME", "arguments": ARGS[, "id": "ID9"]}, ...]</tool_calls>
 *   MINIMAX_M1    <tool_calls>\n{"name": "NAME", "arguments": ARGS}\n...\n</tool_calls>
 *   FIREFUNCTION  [ ]functools[{"name": "NAME", "arguments": ARGS}, ...]
 *   GIGACHAT      <|function_call|>{"name": "NAME", "arguments": ARGS}   (one call: the template renders one)
 *   QWEN3_CODER   <tool_call>\n<function=NAME>\n<parameter=P>\nV\n</parameter>\n...</function>\n</tool_call>\n...
 *                 (toolcall_xml.c: V is raw text for a string parameter, JSON text otherwise;
 *                 the limits of that mapping are listed there)
 *   GLM           <tool_call>NAME[\n]<arg_key>P</arg_key>[\n]<arg_value>V</arg_value>[\n]...</tool_call>\n<tool_call>...
 *                 (GLM-4.5+, Laguna; V as for QWEN3_CODER, with the same limits; the newlines
 *                 optional, as GLM-4.5 writes them and GLM-4.7 / Laguna S do not)
 *   GPT_OSS       harmony (the prompt ends in <|start|>assistant): one call, in either header order,
 *                   <|channel|>C to=functions.NAME[ [<|constrain|>]json]<|message|>ARGS
 *                 |  to=functions.NAME<|channel|>C[ [<|constrain|>]json]<|message|>ARGS
 *                 C "commentary" or "analysis"; the grammar ends after ARGS, where the model
 *                 writes <|call|> (an end-of-generation token in gpt-oss's vocabulary: the
 *                 mask allows end-of-generation tokens exactly where the grammar can end, so
 *                 one call, whatever parallel says).  Reasoning: an analysis message first
 *                 (see Reasoning).  The markers are written as text: gpt-oss's <|channel|>,
 *                 <|message|>, <|start|>, <|constrain|>, <|end|> are tokens the vocabulary
 *                 renders as their text (src/tokenizer/vocab.c), so the mask allows those
 *                 single tokens for them (and the same text spelled by other tokens); a
 *                 vocabulary without them spells them.  NAME: [A-Za-z0-9_./-], what the parser
 *                 reads from the header.  The lazy grammar (after " to=functions.") allows
 *                 the <|channel|>C after the name or not, as it cannot see which order began.
 * Where the name is written raw (not as a JSON string), a tool whose name the
 * parser could not read back (it contains the text that ends the name, or,
 * for MISTRAL's first form and FUNCTIONARY_V31, a character outside
 * [A-Za-z0-9_.:-]) is left out of that form; none left is an error.
 * ID, ID9: [A-Za-z0-9]{9} (Mistral's rule; Apriel and Solar write the same).
 *
 * Families with no grammar (toolparse.h's dj_tool_syntax; their output is
 * parsed from free text, unconstrained):
 *   FUNCTIONARY_V32  the first call follows the prompt's ">>>" with no marker of its
 *                    own and "all\n" switches to text: no trigger to be lazy on
 *   MUSE             harmony headers with <atem:...> XML calls: not mapped (GPT_OSS's
 *                    builder and QWEN3_CODER's are the models for it)
 *   DEEPSEEK_V4, KIMI_K3  XML-like parameters whose values are typed by attributes
 *                    (string="true", type="..."), not yet mapped to grammars;
 *                    QWEN3_CODER's and GLM's builder is the model for adding them
 *   LFM2, GEMMA4     Python-literal / Gemma notation arguments: no schema-to-grammar
 *                    converter for those notations
 *   NONE             the template has no tool-call syntax
 *
 * Reasoning (think_open / think_close, from the template's dj_chat_syntax):
 * when set, the grammars from the first byte (gbnf) begin with the reasoning
 * block — with think_forced_open (the prompt ends inside it) the think text
 * and think_close, otherwise an optional think_open ... think_close — then up
 * to 8 of [ \t\r\n], then what the mode allows.  Think text is anything
 * without think_close.  So a thinking model (QwQ, Qwen3, DeepSeek R1) is never
 * forced to write its calls inside its reasoning.  The lazy grammar is the
 * same as without reasoning (it starts after the trigger).  GPT_OSS: the
 * block is a message, think_open text think_close then "<|start|>assistant"
 * (no whitespace), its text without <|call|> and <|return|> either (the
 * parser ends a message at any of its end markers); think_forced_open is
 * ignored (a harmony prompt never ends inside a message: toolparse.h).
 *
 * Modes (tool_choice):
 *   NONE      no grammar: every field of the result is NULL.
 *   REQUIRED  the reply is tool calls only (one, or with parallel one or more).
 *   NAMED     like REQUIRED with only the function opts.name.
 *   AUTO      free text, then optionally tool calls (and nothing after them).
 *             The free text cannot contain the trigger (below), think_open,
 *             nor the family's other call marker (<|python_tag|>), so a reply
 *             has one reading.  LLAMA3: the parser finds the bare JSON call
 *             only at the start of the output, so there it is the calls or
 *             text that does not start with '{' or whitespace.
 *
 * The result, struct dj_toolcall_grammar (all malloc'd, freed by
 * toolcall_grammar_free):
 *   gbnf       root matches the whole reply, from its first byte.
 *   trigger    the text that starts the tool calls: chat_tool_trigger() of
 *              the family (toolcall_format_trigger), "{" (JSON, one call) or
 *              "[" (JSON, parallel).
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
enum dj_tool_format {
    DJ_TOOL_FORMAT_HERMES = 0,
    DJ_TOOL_FORMAT_JSON,
    DJ_TOOL_FORMAT_LLAMA3,
    DJ_TOOL_FORMAT_MISTRAL,
    DJ_TOOL_FORMAT_DEEPSEEK_V3,
    DJ_TOOL_FORMAT_DEEPSEEK_V31,
    DJ_TOOL_FORMAT_FUNCTIONARY_V31,
    DJ_TOOL_FORMAT_COMMAND_R,
    DJ_TOOL_FORMAT_GRANITE,
    DJ_TOOL_FORMAT_KIMI_K2,
    DJ_TOOL_FORMAT_SOLAR,
    DJ_TOOL_FORMAT_NEMOTRON,
    DJ_TOOL_FORMAT_APRIEL,
    DJ_TOOL_FORMAT_MINIMAX_M1,
    DJ_TOOL_FORMAT_FIREFUNCTION,
    DJ_TOOL_FORMAT_GIGACHAT,
    DJ_TOOL_FORMAT_QWEN3_CODER,
    DJ_TOOL_FORMAT_GLM,
    DJ_TOOL_FORMAT_GPT_OSS,
    DJ_TOOL_FORMAT_N
};

struct dj_toolcall_opts {
    enum dj_tool_choice choice;
    const char *name;                  /* DJ_TOOL_NAMED: the function to call */
    bool parallel;                     /* parallel_tool_calls: one or more calls; false: exactly one */
    enum dj_tool_format format;
    struct dj_json_schema_opts schema; /* whitespace, strict...; root_name and rule_prefix are not used */
    const char *think_open, *think_close; /* the family's reasoning markers, or NULL (see Reasoning above) */
    bool think_forced_open;               /* the prompt ends inside a think block */
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

/* "hermes", "llama3", ... (NULL for an unknown format). */
const char *toolcall_format_name(enum dj_tool_format f);
/* The trigger of f's lazy grammar (parallel matters for JSON only); NULL for an unknown format. */
const char *toolcall_format_trigger(enum dj_tool_format f, bool parallel);

#endif
