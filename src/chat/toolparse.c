/*
 * toolparse.c — the output parser's front: recognising a template's family
 * (chat_syntax_detect), the table of families and their call scripts, and the
 * streaming driver with its two text modes (content, reasoning).
 *
 * The scripts below are read by toolparse_ops.c; the JSON validator and the
 * TOOL_ARGS output are in toolparse_json.c; toolparse_int.h draws the whole
 * machine.  Whitespace: content and reasoning are trimmed where they meet a
 * marker (start and end of output, think markers, tool calls), as OpenAI
 * clients expect ("<think>\nx\n</think>\n\nHi" gives reasoning "x", content
 * "Hi"); a whitespace run over TP_WS_CAP bytes is passed on untrimmed, so the
 * held-back text stays bounded.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/toolparse_int.h"
#include "core/rng.h"

/* ---- scripts ------------------------------------------------------------- */

static const struct tp_jcfg jc_one = {.array = true};
static const struct tp_jcfg jc_multi = {.array = true, .multi = true};
static const struct tp_jcfg jc_bare = {.tentative = true};

static const struct tp_op s_hermes[] = {
    {.k = OP_WS}, {.k = OP_JCALLS, .d = &jc_one}, {.k = OP_WS}, {.k = OP_LIT, .s = "</tool_call>"}, {.k = OP_END},
};

static const struct tp_xcfg x_qwen = {.key_open = "<parameter=", .key_close = ">", .val_close = "</parameter>",
                                      .call_close = "</function>", .strip_nl = true};
static const struct tp_op s_qwen3c[] = {
    {.k = OP_WS}, {.k = OP_LIT, .s = "<function="}, {.k = OP_NAME, .s = ">"}, {.k = OP_XPARAMS, .d = &x_qwen},
    {.k = OP_WS}, {.k = OP_LIT, .s = "</tool_call>"}, {.k = OP_END},
};

static const struct tp_op s_llama_bare[] = {
    {.k = OP_JCALLS, .d = &jc_bare}, {.k = OP_WS}, {.k = OP_OPT, .s = "<|eom_id|>"}, {.k = OP_END},
};
static const struct tp_op s_llama_tag[] = {
    {.k = OP_WS}, {.k = OP_IFJSON, .j = 4},
    {.k = OP_CODE, .s = "<|eom_id|>", .d = "python"}, {.k = OP_OPT, .s = "<|eom_id|>"}, {.k = OP_END},
    {.k = OP_JCALLS, .d = &jc_one}, {.k = OP_WS}, {.k = OP_OPT, .s = "<|eom_id|>"}, {.k = OP_END},
};

static const struct tp_op s_mistral[] = {
    {.k = OP_WS}, {.k = OP_IFJSON, .j = 7},
    {.k = OP_NAME, .f = F_STRICT | F_DEFER, .s = "["},
    {.k = OP_IFLIT, .j = 2, .s = "CALL_ID]"}, {.k = OP_SKIPTO, .s = "["},
    {.k = OP_LIT, .s = "ARGS]"}, {.k = OP_ARGS, .s = "[TOOL_CALLS]"}, {.k = OP_END},
    {.k = OP_JCALLS, .d = &jc_one}, {.k = OP_END},
};

#define DS_CALL "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALLS "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"
#define DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

static const struct tp_op s_dsv3[] = {
    {.k = OP_WS}, {.k = OP_LIT, .s = DS_CALL}, {.k = OP_SKIPTO, .s = DS_SEP}, {.k = OP_NAME, .s = "\n"},
    {.k = OP_WS}, {.k = OP_OPT, .s = "```json"}, {.k = OP_WS}, {.k = OP_ARGS, .s = DS_CALL_END},
    {.k = OP_WS}, {.k = OP_OPT, .s = "```"}, {.k = OP_WS}, {.k = OP_LIT, .s = DS_CALL_END},
    {.k = OP_WS}, {.k = OP_IFPEEK, .j = -12, .s = DS_CALL}, {.k = OP_OPT, .s = DS_CALLS_END}, {.k = OP_END},
};
static const struct tp_op s_dsv31[] = {
    {.k = OP_WS}, {.k = OP_LIT, .s = DS_CALL}, {.k = OP_NAME, .s = DS_SEP}, {.k = OP_WS}, {.k = OP_ARGS, .s = DS_CALL_END},
    {.k = OP_WS}, {.k = OP_LIT, .s = DS_CALL_END},
    {.k = OP_WS}, {.k = OP_IFPEEK, .j = -7, .s = DS_CALL}, {.k = OP_OPT, .s = DS_CALLS_END}, {.k = OP_END},
};

static const struct tp_op s_fv31[] = {
    {.k = OP_NAME, .f = F_STRICT, .s = ">"}, {.k = OP_WS}, {.k = OP_ARGS, .s = "</function>"}, {.k = OP_WS}, {.k = OP_LIT, .s = "</function>"}, {.k = OP_END},
};
static const struct tp_op s_fv31_py[] = {
    {.k = OP_CODE, .s = "<|eom_id|>", .d = "python"}, {.k = OP_OPT, .s = "<|eom_id|>"}, {.k = OP_END},
};
static const struct tp_op s_fv32[] = {
    {.k = OP_NAME, .f = F_STRICT | F_ALL, .s = "\n"}, {.k = OP_IFJSON, .j = 3},
    {.k = OP_CODE, .s = ">>>"}, {.k = OP_END},
    {.k = OP_ARGS, .s = ">>>"}, {.k = OP_END},
};

static const struct tp_op s_command_r[] = {
    {.k = OP_WS}, {.k = OP_JCALLS, .d = &jc_one}, {.k = OP_WS}, {.k = OP_LIT, .s = "<|END_ACTION|>"}, {.k = OP_END},
};
static const struct tp_op s_json_tail[] = { /* Granite, GigaChat, firefunction: the JSON ends the call */
    {.k = OP_WS}, {.k = OP_JCALLS, .d = &jc_one}, {.k = OP_END},
};
static const struct tp_op s_nemotron[] = {
    {.k = OP_WS}, {.k = OP_JCALLS, .d = &jc_one}, {.k = OP_WS}, {.k = OP_LIT, .s = "</TOOLCALL>"}, {.k = OP_END},
};
static const struct tp_op s_tool_calls[] = { /* Apriel, MiniMax-M1 */
    {.k = OP_WS}, {.k = OP_JCALLS, .d = &jc_multi}, {.k = OP_WS}, {.k = OP_LIT, .s = "</tool_calls>"}, {.k = OP_END},
};

static const struct tp_op s_kimi2[] = {
    {.k = OP_WS}, {.k = OP_LIT, .s = "<|tool_call_begin|>"}, {.k = OP_NAME, .f = F_KIMI, .s = "<|tool_call_argument_begin|>"},
    {.k = OP_WS}, {.k = OP_ARGS, .s = "<|tool_call_end|>"}, {.k = OP_WS}, {.k = OP_LIT, .s = "<|tool_call_end|>"},
    {.k = OP_WS}, {.k = OP_IFPEEK, .j = -7, .s = "<|tool_call_begin|>"}, {.k = OP_OPT, .s = "<|tool_calls_section_end|>"}, {.k = OP_END},
};

static const struct tp_xcfg x_glm = {.key_open = "<arg_key>", .key_close = "</arg_key>", .val_open = "<arg_value>",
                                     .val_close = "</arg_value>", .call_close = "</tool_call>"};
static const struct tp_op s_glm[] = {
    {.k = OP_WS}, {.k = OP_NAME, .f = F_CHARSET | F_DEFER, .s = "<"}, {.k = OP_XPARAMS, .d = &x_glm}, {.k = OP_END},
};

static const struct tp_xcfg x_dsml = {.key_open = "<" DSML "parameter name=\"", .key_close = "\"", .attr_end = ">",
                                      .val_close = "</" DSML "parameter>", .call_close = "</" DSML "invoke>"};
static const struct tp_op s_dsml[] = {
    {.k = OP_WS}, {.k = OP_LIT, .s = "<" DSML "invoke name=\""}, {.k = OP_NAME, .s = "\""}, {.k = OP_SKIPTO, .s = ">"},
    {.k = OP_XPARAMS, .d = &x_dsml}, {.k = OP_WS}, {.k = OP_IFPEEK, .j = -5, .s = "<" DSML "invoke"},
    {.k = OP_OPT, .s = "</" DSML "tool_calls>"}, {.k = OP_END},
};

static const struct tp_xcfg x_kimi3 = {.key_open = "<|open|>argument key=\"", .key_close = "\"", .attr_end = "<|sep|>",
                                       .val_close = "<|close|>argument<|sep|>", .call_close = "<|close|>call<|sep|>",
                                       .json_open = "<|open|>json", .json_close = "<|close|>json<|sep|>", .unescape = true};
static const struct tp_op s_kimi3[] = {
    {.k = OP_WS}, {.k = OP_LIT, .s = "<|open|>call tool=\""}, {.k = OP_NAME, .f = F_UNESC, .s = "\""}, {.k = OP_SKIPTO, .s = "<|sep|>"},
    {.k = OP_XPARAMS, .d = &x_kimi3}, {.k = OP_WS}, {.k = OP_IFPEEK, .j = -5, .s = "<|open|>call"},
    {.k = OP_OPT, .s = "<|close|>tools<|sep|>"}, {.k = OP_END},
};

static const struct tp_xcfg x_atem = {.key_open = "<atem:parameter name=\"", .key_close = "\"", .attr_end = ">",
                                      .val_close = "</atem:parameter>", .call_close = "</atem:invoke>"};
static const struct tp_op s_atem[] = {
    {.k = OP_WS}, {.k = OP_LIT, .s = "<atem:invoke name=\""}, {.k = OP_NAME, .s = "\""}, {.k = OP_SKIPTO, .s = ">"},
    {.k = OP_XPARAMS, .d = &x_atem}, {.k = OP_WS}, {.k = OP_IFPEEK, .j = -5, .s = "<atem:invoke"},
    {.k = OP_OPT, .s = "</atem:function_calls>"}, {.k = OP_END},
};

static const struct tp_op s_lfm2[] = {
    {.k = OP_WS}, {.k = OP_PYCALLS}, {.k = OP_WS}, {.k = OP_LIT, .s = "<|tool_call_end|>"}, {.k = OP_END},
};
static const struct tp_op s_gemma4[] = {
    {.k = OP_LIT, .s = "call:"}, {.k = OP_NAME, .f = F_CHARSET, .s = "{"}, {.k = OP_GEMMA}, {.k = OP_LIT, .s = "<tool_call|>"}, {.k = OP_END},
};
static const struct tp_op s_solar[] = {
    {.k = OP_WS}, {.k = OP_LIT, .s = "<|tool_call:begin|>"}, {.k = OP_SKIPTO, .s = "<|tool_call:name|>"},
    {.k = OP_NAME, .s = "<|tool_call:args|>"}, {.k = OP_WS}, {.k = OP_ARGS, .s = "<|tool_call:end|>"},
    {.k = OP_WS}, {.k = OP_LIT, .s = "<|tool_call:end|>"}, {.k = OP_WS}, {.k = OP_IFPEEK, .j = -8, .s = "<|tool_call:begin|>"},
    {.k = OP_OPT, .s = "<|calls|>"}, {.k = OP_END},
};

static const struct tp_hcfg h_gpt_oss = {.start = "<|start|>assistant", .channel = "<|channel|>", .message = "<|message|>",
                                         .ends = {"<|end|>", "<|call|>", "<|return|>"}};
static const struct tp_op s_gpt_oss_call[] = {
    {.k = OP_ARGS, .s = "<|call|>"}, {.k = OP_WS}, {.k = OP_OPT, .s = "<|call|>"}, {.k = OP_OPT, .s = "<|end|>"}, {.k = OP_HDR},
};
static const struct tp_hcfg h_muse = {.start = "<|start|>assistant", .message = "<|message|>",
                                      .ends = {"<|eom|>", "<|eot|>"}, .muse = true};

static const struct tp_family families[DJ_TOOLS_N] = {
    [DJ_TOOLS_NONE] = {.id = DJ_TOOLS_NONE, .name = "none"},
    [DJ_TOOLS_HERMES] = {.id = DJ_TOOLS_HERMES, .name = "hermes", .trigger_text = "<tool_call>",
                         .trig = {{.marker = "<tool_call>", .script = s_hermes}}},
    [DJ_TOOLS_QWEN3_CODER] = {.id = DJ_TOOLS_QWEN3_CODER, .name = "qwen3-coder", .trigger_text = "<tool_call>",
                              .trig = {{.marker = "<tool_call>", .script = s_qwen3c}}},
    [DJ_TOOLS_LLAMA3] = {.id = DJ_TOOLS_LLAMA3, .name = "llama3",
                         .trigger_text = "{\"name\"", .trig = {{.marker = "<|python_tag|>", .script = s_llama_tag}}, .bare_script = s_llama_bare},
    [DJ_TOOLS_MISTRAL] = {.id = DJ_TOOLS_MISTRAL, .name = "mistral", .trigger_text = "[TOOL_CALLS]",
                          .trig = {{.marker = "[TOOL_CALLS]", .script = s_mistral}}},
    [DJ_TOOLS_DEEPSEEK_V3] = {.id = DJ_TOOLS_DEEPSEEK_V3, .name = "deepseek-v3", .trigger_text = DS_CALLS,
                              .trig = {{.marker = DS_CALLS, .script = s_dsv3}}},
    [DJ_TOOLS_DEEPSEEK_V31] = {.id = DJ_TOOLS_DEEPSEEK_V31, .name = "deepseek-v3.1", .trigger_text = DS_CALLS,
                               .trig = {{.marker = DS_CALLS, .script = s_dsv31}}},
    [DJ_TOOLS_FUNCTIONARY_V31] = {.id = DJ_TOOLS_FUNCTIONARY_V31, .name = "functionary-v3.1",
                                  .trigger_text = "<function=",
                                  .trig = {{.marker = "<function=", .script = s_fv31}, {.marker = "<|python_tag|>", .script = s_fv31_py}}},
    [DJ_TOOLS_FUNCTIONARY_V32] = {.id = DJ_TOOLS_FUNCTIONARY_V32, .name = "functionary-v3.2", .trigger_text = ">>>",
                                  .trig = {{.marker = ">>>", .script = s_fv32}}, .start_script = s_fv32},
    [DJ_TOOLS_COMMAND_R] = {.id = DJ_TOOLS_COMMAND_R, .name = "command-r7b", .trigger_text = "<|START_ACTION|>",
                            .trig = {{.marker = "<|START_ACTION|>", .script = s_command_r}},
                            .drops = {"<|START_RESPONSE|>", "<|END_RESPONSE|>"}},
    [DJ_TOOLS_GRANITE] = {.id = DJ_TOOLS_GRANITE, .name = "granite", .trigger_text = "<|tool_call|>",
                          .trig = {{.marker = "<|tool_call|>", .script = s_json_tail}},
                          .drops = {"<response>", "</response>"}},
    [DJ_TOOLS_GPT_OSS] = {.id = DJ_TOOLS_GPT_OSS, .name = "gpt-oss", .trigger_text = " to=functions.",
                          .harmony = &h_gpt_oss, .hcall_script = s_gpt_oss_call},
    [DJ_TOOLS_KIMI_K2] = {.id = DJ_TOOLS_KIMI_K2, .name = "kimi-k2", .trigger_text = "<|tool_calls_section_begin|>",
                          .trig = {{.marker = "<|tool_calls_section_begin|>", .script = s_kimi2}}},
    [DJ_TOOLS_GLM] = {.id = DJ_TOOLS_GLM, .name = "glm", .trigger_text = "<tool_call>",
                      .trig = {{.marker = "<tool_call>", .script = s_glm}}},
    [DJ_TOOLS_DEEPSEEK_V4] = {.id = DJ_TOOLS_DEEPSEEK_V4, .name = "deepseek-v4", .trigger_text = "<" DSML "tool_calls>",
                              .trig = {{.marker = "<" DSML "tool_calls>", .script = s_dsml}}},
    [DJ_TOOLS_KIMI_K3] = {.id = DJ_TOOLS_KIMI_K3, .name = "kimi-k3", .trigger_text = "<|open|>tools<|sep|>",
                          .trig = {{.marker = "<|open|>tools<|sep|>", .script = s_kimi3}},
                          .drops = {"<|open|>response<|sep|>", "<|close|>response<|sep|>"}},
    [DJ_TOOLS_MUSE] = {.id = DJ_TOOLS_MUSE, .name = "muse", .trigger_text = "<atem:function_calls>",
                       .trig = {{.marker = "<atem:function_calls>", .script = s_atem}}, .harmony = &h_muse},
    [DJ_TOOLS_LFM2] = {.id = DJ_TOOLS_LFM2, .name = "lfm2", .trigger_text = "<|tool_call_start|>",
                       .trig = {{.marker = "<|tool_call_start|>", .script = s_lfm2}}},
    [DJ_TOOLS_GEMMA4] = {.id = DJ_TOOLS_GEMMA4, .name = "gemma4", .trigger_text = "<|tool_call>",
                         .trig = {{.marker = "<|tool_call>", .script = s_gemma4}}},
    [DJ_TOOLS_SOLAR] = {.id = DJ_TOOLS_SOLAR, .name = "solar", .trigger_text = "<|tool_calls|>",
                        .trig = {{.marker = "<|tool_calls|>", .script = s_solar}},
                        .drops = {"<|begin|>assistant", "<|content|>"}},
    [DJ_TOOLS_NEMOTRON] = {.id = DJ_TOOLS_NEMOTRON, .name = "nemotron", .trigger_text = "<TOOLCALL>",
                           .trig = {{.marker = "<TOOLCALL>", .script = s_nemotron}}},
    [DJ_TOOLS_APRIEL] = {.id = DJ_TOOLS_APRIEL, .name = "apriel", .trigger_text = "<tool_calls>",
                         .trig = {{.marker = "<tool_calls>", .script = s_tool_calls}},
                         .drops = {"[END FINAL RESPONSE]"}},
    [DJ_TOOLS_MINIMAX_M1] = {.id = DJ_TOOLS_MINIMAX_M1, .name = "minimax-m1", .trigger_text = "<tool_calls>",
                             .trig = {{.marker = "<tool_calls>", .script = s_tool_calls}}},
    [DJ_TOOLS_FIREFUNCTION] = {.id = DJ_TOOLS_FIREFUNCTION, .name = "firefunction", .trigger_text = "functools",
                               .trig = {{.marker = "functools", .script = s_json_tail}}},
    [DJ_TOOLS_GIGACHAT] = {.id = DJ_TOOLS_GIGACHAT, .name = "gigachat", .trigger_text = "<|function_call|>",
                           .trig = {{.marker = "<|function_call|>", .script = s_json_tail}}},
};

const struct tp_family *tp_family_of(enum dj_tool_syntax s) {
    return (unsigned)s < DJ_TOOLS_N ? &families[s] : &families[DJ_TOOLS_NONE];
}

const char *chat_tool_syntax_name(enum dj_tool_syntax s) { return tp_family_of(s)->name; }

const char *chat_tool_trigger(enum dj_tool_syntax s) { return tp_family_of(s)->trigger_text; }

/* ---- detection ------------------------------------------------------------- */

static bool has(const char *src, size_t n, const char *s) { return memmem(src, n, s, strlen(s)) != NULL; }

/* With thinking enabled, does the generation prompt end in open?  A string
 * literal ending in the marker (optionally plus "\n") after the template's
 * last add_generation_prompt: '<think>\n' (DeepSeek R1, Qwen3.5, QwQ, ...),
 * not '<think>\n\n</think>\n\n' (Qwen3 with thinking off). */
static bool gen_prompt_opens(const char *src, size_t n, const char *open) {
    const char *g = NULL;
    for (const char *q = src; (q = memmem(q, n - (size_t)(q - src), "add_generation_prompt", 21)); q += 21) g = q;
    if (!g) return false;
    size_t m = strlen(open), rest = n - (size_t)(g - src);
    for (const char *q = g; (q = memmem(q, rest - (size_t)(q - g), open, m)); q += m) {
        const char *t = q + m, *end = src + n;
        if (t + 2 <= end && t[0] == '\\' && t[1] == 'n') t += 2;
        else if (t < end && *t == '\n') t++;
        if (t < end && (*t == '\'' || *t == '"')) return true;
    }
    return false;
}

/* Does s occur after the template's last add_generation_prompt? */
static bool gen_prompt_has(const char *src, size_t n, const char *s) {
    const char *g = NULL;
    for (const char *q = src; (q = memmem(q, n - (size_t)(q - src), "add_generation_prompt", 21)); q += 21) g = q;
    return g && memmem(g, n - (size_t)(g - src), s, strlen(s)) != NULL;
}

struct dj_chat_syntax chat_syntax_detect(const char *src, size_t n) {
    struct dj_chat_syntax s = {DJ_TOOLS_NONE, NULL, NULL, false};
    enum dj_tool_syntax t = DJ_TOOLS_NONE;
    if (!src) return s;
#define H(x) has(src, n, x)
    if (H("<|channel|>") && H("<|start|>") && (H("<|constrain|>") || H("functions."))) t = DJ_TOOLS_GPT_OSS;
    else if (H("<atem:function_calls>")) t = DJ_TOOLS_MUSE;
    else if (H(DSML)) t = DJ_TOOLS_DEEPSEEK_V4;
    else if (H("tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin")) t = H("```json") ? DJ_TOOLS_DEEPSEEK_V3 : DJ_TOOLS_DEEPSEEK_V31;
    else if (H("<|tool_calls_section_begin|>")) t = DJ_TOOLS_KIMI_K2;
    else if (H("open_tag('call'")) t = DJ_TOOLS_KIMI_K3;
    else if (H("]<]minimax[>[")) t = DJ_TOOLS_NONE; /* MiniMax-M3's nested XML calls: not supported */
    else if (H("<function=") && H("<parameter=")) t = DJ_TOOLS_QWEN3_CODER;
    else if (H("<arg_key>")) t = DJ_TOOLS_GLM;
    else if (H("[TOOL_CALLS]")) t = DJ_TOOLS_MISTRAL;
    else if (H("<|START_ACTION|>")) t = DJ_TOOLS_COMMAND_R;
    else if (H("<|tool_call|>")) t = DJ_TOOLS_GRANITE;
    else if (H("<|tool_call>")) t = DJ_TOOLS_GEMMA4;
    else if (H("<|tool_call_start|>") || H("<|tool_list_start|>")) t = DJ_TOOLS_LFM2;
    else if (H("<|tool_call:begin|>")) t = DJ_TOOLS_SOLAR;
    else if (H("<TOOLCALL>")) t = DJ_TOOLS_NEMOTRON;
    else if (H("<tool_calls>")) t = H("<tool_calls>[") ? DJ_TOOLS_APRIEL : DJ_TOOLS_MINIMAX_M1;
    else if (H("functools[")) t = DJ_TOOLS_FIREFUNCTION;
    else if (H("<|function_call|>")) t = DJ_TOOLS_GIGACHAT;
    else if (H(">>>") && H("<|start_header_id|>")) t = DJ_TOOLS_FUNCTIONARY_V32;
    else if (H("<function=")) t = DJ_TOOLS_FUNCTIONARY_V31;
    else if (H("<tool_call>")) t = DJ_TOOLS_HERMES;
    else if (H("<|python_tag|>") || (H("<|start_header_id|>") && H("\"parameters\""))) t = DJ_TOOLS_LLAMA3;
    s.tools = t;

    switch (t) {
    case DJ_TOOLS_GPT_OSS:
        s.think_open = "<|channel|>analysis<|message|>";
        s.think_close = "<|end|>";
        return s; /* harmony channels: no forced-open prompt */
    case DJ_TOOLS_MUSE:
        s.think_open = " to=self<|message|>";
        s.think_close = "<|eom|>";
        return s;
    case DJ_TOOLS_COMMAND_R: s.think_open = "<|START_THINKING|>"; s.think_close = "<|END_THINKING|>"; break;
    case DJ_TOOLS_GEMMA4: s.think_open = "<|channel>thought"; s.think_close = "<channel|>"; break;
    case DJ_TOOLS_KIMI_K3: s.think_open = "<|open|>think<|sep|>"; s.think_close = "<|close|>think<|sep|>"; break;
    case DJ_TOOLS_SOLAR:
        if (H("<|think|>")) { s.think_open = "<|think|>"; s.think_close = "<|end|>"; }
        break;
    case DJ_TOOLS_APRIEL:
        if (H("[BEGIN FINAL RESPONSE]")) { s.think_open = "Here are my reasoning steps:"; s.think_close = "[BEGIN FINAL RESPONSE]"; }
        break;
    case DJ_TOOLS_MISTRAL:
        if (H("[THINK]")) { s.think_open = "[THINK]"; s.think_close = "[/THINK]"; }
        break;
    default:
        break;
    }
    if (!s.think_open) {
        if (H("<mm:think>")) { s.think_open = "<mm:think>"; s.think_close = "</mm:think>"; }
        else if (H("<think>") || H("</think>")) { s.think_open = "<think>"; s.think_close = "</think>"; }
    }
    if (s.think_open) {
        if (t == DJ_TOOLS_APRIEL) s.think_forced_open = H("reasoning_asst_turn_start");
        else if (t == DJ_TOOLS_KIMI_K3) s.think_forced_open = H("open_tag('think' if thinking");
        else if (t == DJ_TOOLS_DEEPSEEK_V4) s.think_forced_open = gen_prompt_has(src, n, "thinking_start_token");
        else s.think_forced_open = gen_prompt_opens(src, n, s.think_open);
    }
#undef H
    return s;
}

bool chat_syntax_prompt_opens_think(const struct dj_chat_syntax *syn, const char *prompt, size_t n) {
    if (!syn || !syn->think_open || !prompt || syn->tools == DJ_TOOLS_GPT_OSS || syn->tools == DJ_TOOLS_MUSE) return false;
    while (n && tp_is_ws((unsigned char)prompt[n - 1])) n--;
    const char *o = syn->think_open;
    size_t m = strlen(o);
    while (m && tp_is_ws((unsigned char)o[m - 1])) m--;
    return n >= m && memcmp(prompt + n - m, o, m) == 0;
}

/* ---- emission ------------------------------------------------------------------ */

void tp_emit(struct dj_toolparse *p, int kind, const char *s, size_t n) {
    if (!n) return;
    if (p->stage_n) tp_stage_flush(p, true);
    struct dj_chat_delta d = {.kind = (enum dj_chat_delta_kind)kind, .text = s, .n = n};
    p->emit(p->ud, &d);
}

void tp_seg_end(struct dj_toolparse *p) {
    p->seg.ws_n = 0;
    p->seg.ws_over = false;
    p->seg.at_start = true;
}

/* Content or reasoning text: leading whitespace of a segment dropped, trailing
 * whitespace held until more text shows it is inside. */
void tp_text(struct dj_toolparse *p, int kind, const char *s, size_t n) {
    struct tp_seg *g = &p->seg;
    if (g->kind != kind) {
        tp_seg_end(p);
        g->kind = kind;
    }
    size_t i = 0;
    if (g->at_start) {
        while (i < n && tp_is_ws((unsigned char)s[i])) i++;
        if (i == n) return;
        g->at_start = false;
    }
    size_t last = n;
    while (last > i && tp_is_ws((unsigned char)s[last - 1])) last--;
    if (last > i) {
        if (g->ws_n) tp_emit(p, kind, g->ws, g->ws_n);
        g->ws_n = 0;
        g->ws_over = false;
        tp_emit(p, kind, s + i, last - i);
    }
    size_t t = n - last;
    if (!t) return;
    if (g->ws_over) {
        tp_emit(p, kind, s + last, t);
    } else if (g->ws_n + t > TP_WS_CAP) {
        tp_emit(p, kind, g->ws, g->ws_n);
        tp_emit(p, kind, s + last, t);
        g->ws_n = 0;
        g->ws_over = true;
    } else {
        memcpy(g->ws + g->ws_n, s + last, t);
        g->ws_n += t;
    }
}

void tp_fail(struct dj_toolparse *p, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = true;
    int k = snprintf(p->err, sizeof p->err, "tool-call output (%s) at byte %llu: ", p->fam->name,
                     (unsigned long long)(p->base + p->pos));
    if (k < 0 || (size_t)k >= sizeof p->err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + k, sizeof p->err - (size_t)k, fmt, ap);
    va_end(ap);
}

void tp_to_text(struct dj_toolparse *p) {
    p->mode = TM_TEXT;
    tp_seg_end(p);
}

void tp_revert(struct dj_toolparse *p) {
    p->dname_n = 0;
    p->pos = p->trig_pos;
    if (p->trig_len) p->skip_trig = p->base + p->trig_pos + 1;
    p->mode = TM_TEXT;
    p->name_n = 0;
}

void tp_commit(struct dj_toolparse *p) {
    if (p->committed) return;
    p->committed = true;
    tp_seg_end(p); /* the whitespace before the trigger is dropped */
}

static void make_id(uint64_t seed, uint32_t idx, char out[30]) {
    static const char an[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(out, "call_", 5);
    for (unsigned i = 0; i < 24; i++) out[5 + i] = an[dj_rng_u64(seed, (uint64_t)idx * 24 + i) % 62];
    out[29] = '\0';
}

void tp_call_begin(struct dj_toolparse *p, const char *name, size_t n) {
    tp_commit(p);
    if (p->stage_n) tp_stage_flush(p, true);
    char id[30], nm[TP_NAME_MAX + 1];
    if (n > TP_NAME_MAX) n = TP_NAME_MAX;
    memcpy(nm, name, n);
    nm[n] = '\0';
    make_id(p->id_seed, p->n_calls, id);
    struct dj_chat_delta d = {.kind = DJ_DELTA_TOOL_START, .tool_index = p->n_calls, .id = id, .name = nm};
    p->n_calls++;
    p->call_open = true;
    p->nparams = false;
    tp_args_reset(p);
    p->emit(p->ud, &d);
}

void tp_call_end(struct dj_toolparse *p, bool clean) {
    if (!p->call_open) return;
    if (clean && p->args_any && !p->av_bad && !tp_json_complete_here(&p->av))
        tp_fail(p, "tool call %u: the arguments end early", p->n_calls - 1);
    if (!tp_args_close(p)) tp_fail(p, "tool call %u: the arguments cannot be completed to valid JSON", p->n_calls - 1);
    tp_stage_flush(p, true);
    p->call_open = false;
}

/* ---- marker scanning --------------------------------------------------------------- */

static void ms_add(struct tp_markset *ms, const char *s, int act, int arg) {
    if (!s || !*s || ms->n == TP_MAX_MARKERS) return;
    struct tp_marker *m = &ms->m[ms->n++];
    m->s = s;
    m->n = strlen(s);
    m->act = (uint8_t)act;
    m->arg = (uint8_t)arg;
    ms->first[(unsigned char)s[0]] = true;
    if (m->n > ms->maxlen) ms->maxlen = m->n;
}

static void build_marksets(struct dj_toolparse *p) {
    const struct tp_family *f = p->fam;
    bool harmony = f->harmony && !p->harmony_off;
    memset(&p->text_ms, 0, sizeof p->text_ms);
    memset(&p->think_ms, 0, sizeof p->think_ms);
    if (!f->harmony && p->reasoning) {
        ms_add(&p->text_ms, p->syn.think_open, A_THINK, 0);
        ms_add(&p->think_ms, p->syn.think_close, A_UNTHINK, 0);
        ms_add(&p->think_ms, p->syn.think_open, A_DROP, 0);
    }
    if (p->parse_tools)
        for (int i = 0; i < 3; i++) ms_add(&p->text_ms, f->trig[i].marker, A_TRIGGER, i);
    if (p->reasoning)
        for (int i = 0; i < 3; i++) ms_add(&p->text_ms, f->drops[i], A_DROP, 0);
    if (harmony)
        for (int i = 0; i < 3; i++) {
            ms_add(&p->text_ms, f->harmony->ends[i], A_HEND, 0);
            ms_add(&p->think_ms, f->harmony->ends[i], A_HEND, 0);
        }
}

/* The first position of b[0..n) where a marker matches, fully or (before the
 * end of output) as far as the text goes.  *m: the marker, NULL when the
 * match is partial (the text from there must wait) or there is none (n). */
static size_t scan(const struct dj_toolparse *p, const struct tp_markset *ms, const char *b, size_t n,
                   const struct tp_marker **m) {
    for (size_t i = 0; i < n; i++) {
        if (!ms->first[(unsigned char)b[i]]) continue;
        const struct tp_marker *best = NULL;
        bool partial = false;
        for (int k = 0; k < ms->n; k++) {
            const struct tp_marker *mk = &ms->m[k];
            if (mk->s[0] != b[i]) continue;
            size_t avail = n - i;
            if (avail >= mk->n) {
                if (memcmp(b + i, mk->s, mk->n) != 0) continue;
                if (mk->act == A_TRIGGER && p->skip_trig == p->base + (uint64_t)(b + i - p->buf) + 1) continue;
                if (!best || mk->n > best->n) best = mk;
            } else if (!p->eof && memcmp(b + i, mk->s, avail) == 0) {
                partial = true;
            }
        }
        if (partial) {
            *m = NULL;
            return i;
        }
        if (best) {
            *m = best;
            return i;
        }
    }
    *m = NULL;
    return n;
}

/* Content or reasoning up to the next marker. */
static bool step_plain(struct dj_toolparse *p, bool think) {
    const char *b = p->buf + p->pos;
    size_t n = p->len - p->pos;
    int kind = think ? DJ_DELTA_REASONING : DJ_DELTA_CONTENT;
    if (!think && p->bare_pending) {
        size_t i = 0;
        while (i < n && tp_is_ws((unsigned char)b[i])) i++;
        if (i) {
            tp_text(p, kind, b, i);
            p->pos += i;
            return true;
        }
        if (!n) return false;
        p->bare_pending = false;
        if (b[0] == '{') tp_script_start(p, p->fam->bare_script, p->pos, 0);
        return true;
    }
    if (!n) return false;
    const struct tp_marker *m;
    size_t i = scan(p, think ? &p->think_ms : &p->text_ms, b, n, &m);
    if (!m) {
        size_t e = i;
        if (!p->eof && e == n) e -= tp_utf8_tail(b, e);
        if (!e) return false;
        tp_text(p, kind, b, e);
        p->pos += e;
        return true;
    }
    if (i) tp_text(p, kind, b, i);
    size_t at = p->pos + i;
    p->pos = at + m->n;
    switch (m->act) {
    case A_THINK:
        tp_seg_end(p);
        p->mode = TM_THINK;
        break;
    case A_UNTHINK:
        tp_to_text(p);
        break;
    case A_TRIGGER:
        tp_script_start(p, p->fam->trig[m->arg].script, at, m->n);
        break;
    case A_DROP:
        if (!think) tp_seg_end(p);
        break;
    case A_HEND:
        if (p->hend_verbatim) tp_text(p, DJ_DELTA_CONTENT, m->s, m->n);
        p->hend_verbatim = 0;
        tp_seg_end(p);
        p->mode = TM_HDR;
        break;
    }
    return true;
}

/* ---- the object -------------------------------------------------------------------- */

struct dj_toolparse *toolparse_new(const struct dj_chat_syntax *syn, bool parse_tools, bool reasoning, uint64_t id_seed) {
    struct dj_toolparse *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->cap = 256;
    p->buf = malloc(p->cap);
    if (!p->buf) {
        free(p);
        return NULL;
    }
    if (syn) p->syn = *syn;
    p->fam = tp_family_of(p->syn.tools);
    p->parse_tools = parse_tools && p->fam->id != DJ_TOOLS_NONE;
    p->reasoning = reasoning && (p->syn.think_open || p->fam->harmony);
    if (!p->syn.think_open || !p->syn.think_close) p->syn.think_open = p->syn.think_close = NULL;
    p->id_seed = id_seed;
    p->seg.kind = DJ_DELTA_CONTENT;
    p->seg.at_start = true;
    build_marksets(p);
    if (p->fam->harmony) {
        p->mode = TM_HDR;
    } else if (p->reasoning && p->syn.think_forced_open) {
        p->mode = TM_THINK;
    } else if (p->parse_tools && p->fam->start_script) {
        tp_script_start(p, p->fam->start_script, 0, 0);
    } else {
        p->mode = TM_TEXT;
        p->bare_pending = p->parse_tools && p->fam->bare_script;
    }
    return p;
}

void toolparse_free(struct dj_toolparse *p) {
    if (!p) return;
    free(p->buf);
    free(p->pend);
    free(p->vbuf);
    free(p);
}

void tp_harmony_off(struct dj_toolparse *p) {
    p->harmony_off = true;
    build_marksets(p);
    tp_to_text(p);
}

static bool step(struct dj_toolparse *p) {
    switch (p->mode) {
    case TM_TEXT: return step_plain(p, false);
    case TM_THINK: return step_plain(p, true);
    case TM_SCRIPT: return tp_step_script(p);
    case TM_HDR: return tp_step_hdr(p);
    }
    return false;
}

static void run(struct dj_toolparse *p) {
    while (step(p)) {
    }
}

void toolparse_feed(struct dj_toolparse *p, const char *text, size_t n, dj_chat_emit_fn emit, void *ud) {
    if (!p || p->eof) return;
    p->emit = emit;
    p->ud = ud;
    if (n) {
        if (p->len + n > p->cap) {
            size_t cap = p->cap;
            while (cap < p->len + n) cap = cap > SIZE_MAX / 2 ? p->len + n : cap * 2;
            char *nb = realloc(p->buf, cap);
            if (!nb) {
                tp_fail(p, "out of memory (%zu bytes of input held)", p->len + n);
                return;
            }
            p->buf = nb;
            p->cap = cap;
        }
        memcpy(p->buf + p->len, text, n);
        p->len += n;
    }
    run(p);
    if (p->stage_n) tp_stage_flush(p, false);
    /* drop what is consumed; an uncommitted call keeps its trigger for a revert */
    size_t keep = p->pos;
    if (p->mode == TM_SCRIPT && !p->committed && p->trig_pos < keep) keep = p->trig_pos;
    if (keep) {
        memmove(p->buf, p->buf + keep, p->len - keep);
        p->len -= keep;
        p->pos -= keep;
        p->trig_pos = p->trig_pos >= keep ? p->trig_pos - keep : 0;
        p->base += keep;
    }
}

enum dj_status toolparse_finish(struct dj_toolparse *p, dj_chat_emit_fn emit, void *ud) {
    if (!p) return dj_fail(DJ_ERR_INVALID, "toolparse_finish: no parser");
    p->emit = emit;
    p->ud = ud;
    if (!p->eof) {
        p->eof = true;
        /* every step at the end of output either consumes or leaves its mode */
        for (int guard = 0; guard < 64; guard++) {
            run(p);
            if (p->mode != TM_SCRIPT) break;
            tp_script_eof(p);
        }
        if (p->call_open) tp_call_end(p, false);
        tp_seg_end(p);
        tp_stage_flush(p, true);
    }
    if (p->failed) return dj_fail(DJ_ERR_INVALID, "%s", p->err);
    return DJ_OK;
}
