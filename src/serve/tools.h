/* tools.h - the tools a chat request offers: validation, tool_choice, call grammars, prompts.
 *
 * Everything here is a pure function over jansson values, independent of the HTTP layer, so each
 * protocol adapter (OpenAI chat, Anthropic messages, OpenAI Responses) calls the same code:
 *
 *     json_t *tools;  hx_tool_choice choice;  char param[64];
 *     hx_tools_normalize(req_tools, HX_TOOLS_OPENAI_CHAT, &tools, param, sizeof param, &err);
 *     hx_tools_choice(req_choice, HX_TOOLS_OPENAI_CHAT, tools, &choice, param, sizeof param, &err);
 *     if (!hx_tools_template_renders_tools(tpl)) hx_tools_system_prompt(tools, family, &sys, &err);
 *     hx_tools_fold_messages(messages, family, hx_tools_template_has_tool_calls(tpl),
 *                            hx_tools_template_has_tool_role(tpl), &msgs, &err);
 *     if (choice.kind == HX_TOOL_CHOICE_REQUIRED || choice.kind == HX_TOOL_CHOICE_NAMED)
 *         hx_tools_grammar(family, tools, &choice, parallel, &text, &err);  // hx_grammar_compile
 *
 * Normalized tools are in the shape chat templates read:
 * [{"type": "function", "function": {"name", "description", "parameters"}}], names unique.
 *
 * A call grammar accepts exactly one reply made only of tool calls in a family's markup (the
 * markup toolcall.h parses; no text before or between calls; one newline may end it), with each call's name one of the
 * tools and its arguments valid for that tool's parameters schema (sample/json_schema.h). The
 * markup is written as the family's chat template writes it, whitespace kept tight: an optional
 * newline where the template puts one. Families whose arguments are keyword lists (QWEN3_CODER,
 * GEMMA, PYTHONIC) write the declared properties only, in declared order, optional ones
 * omittable; QWEN3_CODER writes string values unquoted, so a string parameter's value must not
 * read as another JSON value (it may not start with whitespace, '{' or '[', and may not be a
 * number, true, false or null) and may not contain "</parameter>".
 * Known looseness: a JSON string argument may contain the family's closing marker (such as
 * "</tool_call>" or "```"), which the parser would take as the end of the call. The markers some
 * families start with ([TOOL_CALLS], DeepSeek's) are special tokens in their vocabularies; the
 * grammar spells them as text.
 *
 * All functions are thread-safe; arguments are borrowed unless said otherwise. */
#ifndef HX_SERVE_TOOLS_H
#define HX_SERVE_TOOLS_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "serve/toolcall.h"

/* The longest tool name (OpenAI's and Anthropic's limit). */
#define HX_TOOLS_NAME_MAX 64

/* Where a request's tools and tool_choice come from. */
typedef enum {
    HX_TOOLS_OPENAI_CHAT = 0, /* [{"type":"function","function":{"name",...}}] */
    HX_TOOLS_ANTHROPIC = 1,   /* [{"name","description"?,"input_schema"}] */
    HX_TOOLS_RESPONSES = 2,   /* [{"type":"function","name",...}] */
    HX_TOOLS_SHAPE_COUNT
} hx_tools_shape;

/* Validates tools (a request's "tools" value) in the given shape and writes *out, a new array in
 * the normalized shape above (caller owns the reference): description defaults to "", parameters
 * to {"type":"object","properties":{}}; "strict" is checked to be a boolean and dropped (a call
 * grammar follows the schema exactly either way). Names must match [A-Za-z0-9_-]{1,64} and be
 * unique. On failure *out is untouched, err names the entry and field ("tools[2].function.name
 * must be ..., got 7") and param (may be NULL; param_cap bytes) receives the JSON path at fault
 * ("tools[2].function.name"). HX_E_INVALID: wrong shape or type, bad or repeated name;
 * HX_E_UNSUPPORTED: a tool type other than a function (OpenAI "custom", Responses "web_search",
 * Anthropic server tools like "web_search_20250305"), named in the message; HX_E_NOMEM. */
hx_status hx_tools_normalize(json_t *tools, hx_tools_shape shape, json_t **out, char *param,
                             size_t param_cap, hx_err *err);

typedef enum {
    HX_TOOL_CHOICE_AUTO = 0,     /* the model decides; the default */
    HX_TOOL_CHOICE_NONE = 1,     /* no calls */
    HX_TOOL_CHOICE_REQUIRED = 2, /* at least one call, any tool (Anthropic "any") */
    HX_TOOL_CHOICE_NAMED = 3,    /* a call of the tool `name` (Anthropic "tool") */
} hx_tool_choice_kind;

typedef struct {
    hx_tool_choice_kind kind;
    char                name[72];         /* NAMED: the tool's name; "" otherwise */
    bool                disable_parallel; /* Anthropic disable_parallel_tool_use (else false) */
} hx_tool_choice;

/* Parses a tool_choice value v (NULL or JSON null: auto) in the given shape into *out:
 *   OPENAI_CHAT  "auto" | "none" | "required" | {"type":"function","function":{"name":N}}
 *   ANTHROPIC    {"type":"auto"|"any"|"tool"|"none", "name":N (tool only),
 *                 "disable_parallel_tool_use":bool}
 *   RESPONSES    "auto" | "none" | "required" | {"type":"function","name":N}
 * norm_tools (normalized, may be NULL for none) must hold the named tool, and at least one tool
 * for "required"/"any". On failure *out is untouched, param (may be NULL) names the field
 * ("tool_choice.function.name"). HX_E_INVALID: a malformed value, an unknown name, nothing to
 * choose from; HX_E_UNSUPPORTED: a choice type not implemented (OpenAI "allowed_tools", a
 * built-in tool type). */
hx_status hx_tools_choice(json_t *v, hx_tools_shape shape, json_t *norm_tools, hx_tool_choice *out,
                          char *param, size_t cap, hx_err *err);

/* Writes grammar text (for hx_grammar_compile; start rule `root`) accepting exactly a reply of
 * one call in family's markup, or with parallel one or more, as described above; with a NAMED
 * choice only that tool may be called. On success *out_text is NUL-terminated text the caller
 * frees with hx_free. HX_E_INVALID: choice is AUTO or NONE (nothing to constrain), the named tool
 * is not in norm_tools, norm_tools is empty or not normalized, family out of range;
 * HX_E_UNSUPPORTED: a parameters schema beyond the json_schema.h subset, or one the family's
 * markup cannot express (a keyword-list family given a schema that is not an object of declared
 * properties, a QWEN3_CODER parameter that may be a string or another type), the message naming
 * the tool and the feature; HX_E_NOMEM. */
hx_status hx_tools_grammar(hx_toolcall_family family, json_t *norm_tools,
                           const hx_tool_choice *choice, bool parallel, char **out_text,
                           hx_err *err);

/* A system text for chat templates that do not render tools themselves: each tool as one JSON
 * line {"name","description","parameters"}, then how to call one in family's markup, how to make
 * several calls, and to answer normally when no tool is needed. *out_text: NUL-terminated, freed
 * with hx_free. HX_E_INVALID for tools not normalized or a family out of range; HX_E_NOMEM. */
hx_status hx_tools_system_prompt(json_t *norm_tools, hx_toolcall_family family, char **out_text,
                                 hx_err *err);

/* Heuristics on a chat template's text (NULL: false). Only the template's code ({{ }} and
 * {% %}, comments excluded) is looked at, so prose in the rendered text does not count. */
/* The template uses the variable `tools` (a whole identifier, not inside a string). */
bool hx_tools_template_renders_tools(const char *tpl);
/* The template mentions tool_calls (as a name or a string, as in message['tool_calls']). */
bool hx_tools_template_has_tool_calls(const char *tpl);
/* The template tests a role against the string 'tool' or 'ipython' (either quote). */
bool hx_tools_template_has_tool_role(const char *tpl);

/* Rewrites a copy of messages (OpenAI-shaped: an array of objects with "role") into *out: a new
 * array of new message objects, so the caller may set their fields, whose values may be shared
 * with messages (which is left untouched):
 *   - !template_has_tool_calls: each assistant message's tool_calls ([{"function": {"name",
 *     "arguments"}}], or {"name","arguments"} entries; arguments a JSON object or a string holding
 *     one) are written in family's markup and appended to its content (after a newline when the
 *     content is not empty; as a text part when the content is an array of parts), and the
 *     tool_calls key is dropped;
 *   - !template_has_tool_role: each run of consecutive role "tool" messages becomes one role
 *     "user" message whose content is "<tool_response>\n" + result + "\n</tool_response>" per
 *     result, joined by newlines (a result's content: a string, or the texts of its parts);
 *   - template_has_tool_calls: each tool_calls[i].function.arguments that is a string holding a
 *     JSON object is replaced by that object (templates iterate or tojson the arguments); a string
 *     that is not one is kept as it was.
 * HX_E_INVALID names the message and field at fault (messages not an array of objects, a call
 * without a name, arguments that are not an object when they must be written out); family out of
 * range; HX_E_NOMEM. */
hx_status hx_tools_fold_messages(json_t *messages, hx_toolcall_family family,
                                 bool template_has_tool_calls, bool template_has_tool_role,
                                 json_t **out, hx_err *err);

#endif
