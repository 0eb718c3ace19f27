/*
 * toolparse.h — tool calls and reasoning in model output: the syntax of each
 * chat-template family (Hermes/Qwen <tool_call> JSON, Qwen3-Coder XML,
 * Llama 3.x JSON / <|python_tag|>, Mistral [TOOL_CALLS], DeepSeek V3/R1,
 * Functionary v3.1/v3.2, Command-R, Granite, gpt-oss channels, ...) parsed
 * into OpenAI-style deltas: content, reasoning_content, and tool calls
 * (id, name, then the arguments' JSON text piece by piece).
 *
 * Streaming: text is fed as the model writes it; a delta is emitted as soon
 * as it is certain (text that may still become a tool-call or think marker is
 * held back until it is decided).  Any split of the text gives the same
 * concatenated deltas.  The concatenated TOOL_ARGS deltas of a call are its
 * complete arguments JSON; the first TOOL_ARGS delta starts with the opening
 * '{' (never dropped).  No delta is empty, and none ends inside a UTF-8
 * sequence unless the output itself ends there.  Knows nothing of models or
 * the engine (src/chat/toolparse*.c; the machine is drawn in toolparse_int.h).
 *
 * Arguments: JSON formats stream the model's own text of the arguments
 * object (the wrapper — "arguments": key, outer '}', ```json fence — cut
 * away); a JSON string holding the object is decoded.  XML-like and Python /
 * Gemma formats are converted to JSON as they stream, keys in the order
 * written.  An XML parameter value (Qwen3-Coder, GLM, DeepSeek V4, Kimi-K3,
 * muse) is raw text: it becomes JSON as-is if it is a complete JSON number,
 * true/false, object or array, and a JSON string of the text otherwise (null
 * and quoted text included) — unless the format types it (DeepSeek V4
 * string="true|false", Kimi-K3 type="string|..."); Qwen3-Coder's newline
 * after <parameter=K> and before </parameter> is not part of the value.
 *
 * Whitespace: content and reasoning are trimmed where they meet a marker (the
 * start and end of output, think markers, tool calls, harmony messages); a
 * run over 4096 bytes is passed on untrimmed.  Content before and after the
 * calls is one content string.  Tool-call ids are "call_" + 24 [A-Za-z0-9]
 * from dj_rng_u64(id_seed, 24 * index + i).
 *
 * Not parsed: end-of-turn / stop tokens (<|im_end|>, <|eot_id|>, ...: the
 * engine stops on them); where the prompt must end for the output to parse,
 * the family says so below.
 */
#ifndef DJ_CHAT_TOOLPARSE_H
#define DJ_CHAT_TOOLPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

enum dj_tool_syntax {
    DJ_TOOLS_NONE = 0,       /* the template has no tool-call syntax: all text is content */
    DJ_TOOLS_HERMES,         /* <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Qwen 2.5/3, QwQ, Hermes, MiMo, Granite 4, Bielik, Reka) */
    DJ_TOOLS_QWEN3_CODER,    /* <tool_call>\n<function=NAME>\n<parameter=P>\nV\n</parameter>\n</function>\n</tool_call> (Qwen3-Coder, Qwen3.5) */
    DJ_TOOLS_LLAMA3,         /* {"name": ..., "parameters": {...}} at the start of output, or <|python_tag|>{...} / <|python_tag|>code */
    DJ_TOOLS_MISTRAL,        /* [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...} ([CALL_ID] optional; each call), or
                                [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...]; [THINK]...[/THINK] */
    DJ_TOOLS_DEEPSEEK_V3,    /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>... */
    DJ_TOOLS_DEEPSEEK_V31,   /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>... */
    DJ_TOOLS_FUNCTIONARY_V31,/* <function=NAME>{...}</function> (Llama 3.1 style) */
    DJ_TOOLS_FUNCTIONARY_V32,/* NAME\n{...}>>>NAME\n{...}, all\ntext>>>...: the prompt ends in ">>>", output starts with a name */
    DJ_TOOLS_COMMAND_R,      /* <|START_ACTION|>[{"tool_call_id": ..., "tool_name": ..., "parameters": {...}}]<|END_ACTION|>;
                                <|START_THINKING|>..<|END_THINKING|>, <|START_RESPONSE|>..<|END_RESPONSE|> (Command-R7B) */
    DJ_TOOLS_GRANITE,        /* <|tool_call|>[{"name": ..., "arguments": {...}}] (Granite 3.x) */
    DJ_TOOLS_GPT_OSS,        /* harmony, the prompt ending in <|start|>assistant: <|channel|>analysis<|message|>..<|end|> is
                                reasoning, <|channel|>final<|message|>.. content, <|channel|>commentary to=functions.NAME
                                <|constrain|>json<|message|>{...}<|call|> a call (to= also before <|channel|>) */
    DJ_TOOLS_KIMI_K2,        /* <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}<|tool_call_end|>... */
    DJ_TOOLS_GLM,            /* <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call> (GLM 4.5, Laguna) */
    DJ_TOOLS_DEEPSEEK_V4,    /* <｜DSML｜tool_calls><｜DSML｜invoke name="NAME"><｜DSML｜parameter name="K" string="true">V</｜DSML｜parameter>... */
    DJ_TOOLS_KIMI_K3,        /* <|open|>tools<|sep|><|open|>call tool="NAME" ...<|sep|><|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|>... */
    DJ_TOOLS_MUSE,           /* the prompt ending in <|start|>assistant: to=self<|message|>..<|eom|> reasoning, to=user content,
                                to=NAME<|message|><atem:function_calls><atem:invoke name="NAME"><atem:parameter name="K">V
                                </atem:parameter>...</atem:invoke></atem:function_calls> a call (muse-glimmer) */
    DJ_TOOLS_LFM2,           /* <|tool_call_start|>[NAME(k='v', n=1), ...]<|tool_call_end|> (Python literals) */
    DJ_TOOLS_GEMMA4,         /* <|tool_call>call:NAME{k:<|"|>v<|"|>,n:1}<tool_call|> */
    DJ_TOOLS_SOLAR,          /* <|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}<|tool_call:end|>...<|calls|> */
    DJ_TOOLS_NEMOTRON,       /* <TOOLCALL>[{"name": ..., "arguments": {...}}, ...]</TOOLCALL> */
    DJ_TOOLS_APRIEL,         /* <tool_calls>[{"name": ..., "arguments": {...}, "id": ...}, ...]</tool_calls> */
    DJ_TOOLS_MINIMAX_M1,     /* <tool_calls>\n{"name": ..., "arguments": {...}}\n{...}\n</tool_calls> */
    DJ_TOOLS_FIREFUNCTION,   /* functools[{"name": ..., "arguments": {...}}, ...] */
    DJ_TOOLS_GIGACHAT,       /* <|function_call|>{"name": ..., "arguments": {...}} (GigaChat 3.1) */
    DJ_TOOLS_N
};

/* What a template's output looks like; from chat_syntax_detect(). */
struct dj_chat_syntax {
    enum dj_tool_syntax tools;
    const char *think_open, *think_close; /* "<think>", "</think>" (or the family's markers); NULL: none */
    bool think_forced_open;               /* the generation prompt already ends in think_open: output starts
                                             inside reasoning (DeepSeek R1, Qwen3.5 with thinking, ...) */
};

/* Recognises a template's family from its source (markers it writes).
 * think_forced_open is read from the source for a render with thinking on
 * (enable_thinking / thinking true where the template reads them): prefer
 * chat_syntax_prompt_opens_think on the prompt actually rendered. */
struct dj_chat_syntax chat_syntax_detect(const char *template_src, size_t n);
/* Whether a rendered prompt ends in the syntax's think_open marker (trailing
 * whitespace ignored): set syn->think_forced_open from it before toolparse_new. */
bool chat_syntax_prompt_opens_think(const struct dj_chat_syntax *syn, const char *prompt, size_t n);
const char *chat_tool_syntax_name(enum dj_tool_syntax s); /* "hermes", "qwen3-coder", ... */

enum dj_chat_delta_kind {
    DJ_DELTA_CONTENT,    /* text, n: visible answer text */
    DJ_DELTA_REASONING,  /* text, n: reasoning (think) text */
    DJ_DELTA_TOOL_START, /* tool_index, id, name: a new call (ids "call_" + 24 alphanumerics, unique per parser) */
    DJ_DELTA_TOOL_ARGS,  /* tool_index, text, n: more of the call's arguments JSON */
};

struct dj_chat_delta {
    enum dj_chat_delta_kind kind;
    uint32_t tool_index;
    const char *id, *name; /* TOOL_START */
    const char *text;      /* CONTENT / REASONING / TOOL_ARGS */
    size_t n;
};

/* The delta and its strings are valid during the call only. */
typedef void (*dj_chat_emit_fn)(void *ud, const struct dj_chat_delta *d);

struct dj_toolparse;

/* parse_tools false: tool syntax is plain content (a request without tools).
 * reasoning false: think markers, and the answer wrappers some families put
 * around content (<|START_RESPONSE|>, <response>, [END FINAL RESPONSE],
 * <|open|>response<|sep|>, <|content|>), are left in the content (harmony: an
 * analysis message is content, header and end marker included; so is a call
 * message with parse_tools false).  id_seed makes the tool-call ids
 * (deterministic for a seed).  NULL when out of memory. */
struct dj_toolparse *toolparse_new(const struct dj_chat_syntax *syn, bool parse_tools, bool reasoning, uint64_t id_seed);
void toolparse_free(struct dj_toolparse *p); /* accepts NULL */

/* Feeds the next piece of generated text (any split, even inside a UTF-8
 * sequence or a marker). */
void toolparse_feed(struct dj_toolparse *p, const char *text, size_t n, dj_chat_emit_fn emit, void *ud);

/* End of generation: emits what was held back.  A tool call left unfinished
 * or with arguments that are not valid JSON is still closed (its arguments
 * completed to valid JSON where possible); returns DJ_ERR_INVALID with a
 * message when the output could not be parsed as the syntax promised (the
 * deltas already emitted stay valid).  Output cut by max_tokens inside a
 * call's arguments is not an error (the call is closed validly); cut before
 * its name it is (nothing was emitted for that call).  When the status is
 * DJ_OK every call's arguments are valid JSON.  Feeding after finish does
 * nothing; finishing again returns the same status. */
enum dj_status toolparse_finish(struct dj_toolparse *p, dj_chat_emit_fn emit, void *ud);

/* The text that starts a tool call in this syntax ("<tool_call>", "[TOOL_CALLS]",
 * ...), for the lazy grammar's trigger; NULL when none is fixed (DJ_TOOLS_NONE).
 * Llama 3.x: "{\"name\"" (the bare-JSON form; <|python_tag|> also starts one);
 * Functionary v3.2: ">>>" (the first call follows the prompt's ">>>" directly);
 * gpt-oss: " to=functions." (in the message header). */
const char *chat_tool_trigger(enum dj_tool_syntax s);

#endif
