/*
 * chat.h — OpenAI-shaped chat messages to prompt tokens: the model's chat
 * template (jinja.h) rendered as transformers' apply_chat_template does, with
 * the input normalisation servers apply first (as llama-server and vLLM do),
 * then tokenized so that only the template's own markup can be a control
 * token: text that came from the messages is tokenized with parse_special
 * off, so a user writing "<|im_end|>" gets those characters, not the token.
 *
 * Depends on core, tokenizer and chat/jinja only (DESIGN.md §2).
 */
#ifndef DJ_CHAT_CHAT_H
#define DJ_CHAT_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/jinja.h"
#include "chat/toolparse.h"
#include "tokenizer/tokenizer.h"

/* The built-in templates for a model without tokenizer.chat_template. */
enum dj_chat_builtin {
    DJ_CHAT_BUILTIN_CHATML, /* chat_builtin_chatml */
    DJ_CHAT_BUILTIN_GEMMA,  /* chat_builtin_gemma */
};

struct dj_chat_template {
    struct dj_jinja *j;
    char *src; /* the template source (malloc'd) */
    size_t n_src;
    char *bos, *eos; /* bos_token / eos_token as text ("" when the vocabulary has none) */
    struct dj_chat_syntax syn; /* how the model writes tool calls and reasoning */
    bool builtin;      /* a built-in template (the model has none): builtin_kind says which */
    enum dj_chat_builtin builtin_kind;
};

/* The built-in template: ChatML with tools in the system message as <tools>
 * JSON lines and calls as <tool_call> JSON (Hermes / Qwen 2.5), tool results
 * as <tool_response> blocks — the format of ../shared/traces. */
extern const char chat_builtin_chatml[];

/* Gemma's turn format (<start_of_turn>user / model, <end_of_turn>; a leading system message
 * folded into the first turn), as Gemma 2 and 3's instruct template writes it; no tool calls. */
extern const char chat_builtin_gemma[];

/* The built-in template for a model of general.architecture `arch` (may be NULL) with vocabulary
 * v that has no template of its own: Gemma's format for gemma, gemma2, gemma3 and gemma3n when
 * <start_of_turn> and <end_of_turn> are each one token of v; ChatML otherwise.  (llama.cpp uses
 * ChatML for every model without a template: common_chat_templates_init.) */
enum dj_chat_builtin chat_builtin_for(const char *arch, const struct dj_vocab *v);
const char *chat_builtin_name(enum dj_chat_builtin kind); /* "built-in Gemma", "built-in ChatML" */
/* chat_template_create of that built-in template (builtin set, builtin_kind = kind). */
enum dj_status chat_template_create_builtin(enum dj_chat_builtin kind, const char *bos, const char *eos,
                                            struct dj_chat_template **out);

/* Compiles src[0..n) (NULL: the built-in ChatML template).  bos / eos: the
 * vocabulary's special-token texts (NULL: ""). */
enum dj_status chat_template_create(const char *src, size_t n, const char *bos, const char *eos,
                                    struct dj_chat_template **out);
void chat_template_free(struct dj_chat_template *t); /* accepts NULL */

/* Copies messages and normalises what templates disagree on, as llama.cpp and
 * vLLM do before rendering: tool-call arguments given as a JSON string become
 * the object (templates print them with tojson); content null on an assistant
 * message with tool calls becomes ""; content-part arrays whose parts are all
 * text become one string (parts joined by "\n").  Returns a new reference, or
 * NULL with a message for messages that are not an array of objects. */
json_t *chat_normalize_messages(const json_t *messages);

/* Renders messages (OpenAI chat shape, normalised) with transformers' call:
 * messages, tools (None when NULL), documents None, add_generation_prompt,
 * bos_token, eos_token, then every key of kwargs (may override).  bos_token and
 * eos_token (unless kwargs gave them) are the template's own text in the output's
 * from_input, like its literals: chat_tokenize matches them as special tokens.  now: the
 * clock strftime_now reads.  Errors: DJ_ERR_INVALID, the template's message. */
enum dj_status chat_render(const struct dj_chat_template *t, const json_t *messages, const json_t *tools,
                           const json_t *kwargs, bool add_generation_prompt, int64_t now, struct dj_jinja_out *out);

/* How chat_render_placed placed the system messages. */
enum dj_system_placement {
    DJ_SYSTEM_AS_IS,        /* every system message rendered where it stands (or there were none) */
    DJ_SYSTEM_FOLDED_LATER, /* those after the first message were folded into the user turns beside them */
    DJ_SYSTEM_FOLDED_ALL,   /* every one was folded (a template without a system role) */
};

/* chat_render as a server needs it, for messages whose system messages may stand anywhere
 * (Anthropic's Messages API and OpenAI's accept them at any position; each applies from where
 * it stands).  First the messages as they are; when the template raises, or renders without
 * the text of a system message (templates that read only messages[0] as the system prompt and
 * skip the others), the system messages after the first message are folded into the user turn
 * beside them (appended to the user message just before, else prepended to the one just after,
 * with a blank line; else they become user messages), and if that still fails, all of them.
 * When no placement renders every system text, the template's own first result stands (its
 * error, or its render).  *how says which placement was used. */
enum dj_status chat_render_placed(const struct dj_chat_template *t, const json_t *messages, const json_t *tools,
                                  const json_t *kwargs, bool add_generation_prompt, int64_t now, struct dj_jinja_out *out,
                                  enum dj_system_placement *how);

/* Tokenizes a render: spans the template wrote with special tokens parsed,
 * spans from the input without; a leading bos_token text is dropped when the
 * vocabulary adds BOS itself (add_bos), so it is not doubled. */
enum dj_status chat_tokenize(const struct dj_vocab *v, const struct dj_chat_template *t, const struct dj_jinja_out *o,
                             bool add_bos, dj_token **out, size_t *n_out);

#endif
