/* toolcall.h - incremental parsers that split a model's generated text into content and tool calls.
 *
 * Each model family writes tool calls in its own markup (what its chat template renders for an
 * assistant message with tool_calls). A parser is made for one family; feed it the reply's text in
 * chunks split anywhere and it calls back, in order, with content runs, the start of each call
 * (index, id, name), fragments of the call's arguments as a JSON object text, and the call's end.
 * At the end, hx_toolcall_finish flushes what was held and the parser keeps every call in full
 * (name, arguments as text and as a jansson object) for non-streamed replies.
 *
 * Invariants: markup never reaches content. Content streams out as soon as it cannot be the start
 * of markup; only a suffix that may grow into a start marker is held back (plus an incomplete
 * UTF-8 sequence, and whitespace or separators right after a call, which are dropped when another
 * call or the end follows). A call's events are emitted once its markup is complete and valid, so
 * malformed markup (invalid JSON, unterminated at the end, a wrong shape) is emitted as content,
 * byte for byte, and nothing has to be taken back. Arguments therefore arrive per call, not per
 * token. Ids are "call_" + 24 hex digits drawn from the seed, so a seed gives the same ids.
 *
 * Families, the markup each reads, and the models that write it:
 *   HERMES       <tool_call>{"name": N, "arguments": {...}}</tool_call>   (Qwen2.5, Qwen3, QwQ)
 *   QWEN3_CODER  <tool_call><function=N><parameter=P>value</parameter></function></tool_call>
 *   LLAMA3       {"name": N, "parameters": {...}} as the whole reply, or after <|python_tag|>;
 *                ';' or whitespace between calls                           (Llama 3.1, 3.2)
 *   MISTRAL      [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]  or [TOOL_CALLS]N[ARGS]{...},
 *                also with [CALL_ID]id before [ARGS]        (Mistral v0.3, Small 3.2, Devstral)
 *   GEMMA        ```tool_code\nN(k=v, ...)\n```  (values JSON, or Python True/False/None)
 *   DEEPSEEK_V3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *                ```json {...} ```<｜tool▁call▁end｜> ... <｜tool▁calls▁end｜>; V3.1 writes
 *                <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜> instead
 *   PYTHONIC     [N(k=v, ...), N2(...)] as the whole reply  (Llama 3.2/4, Gemma 3 pythonic)
 *   GENERIC      HERMES tags, or a bare {"name": N, "arguments"|"parameters": {...}} reply
 *
 * Usage:
 *     hx_toolcall_params p = hx_toolcall_params_default();
 *     p.family = hx_toolcall_detect(chat_template, arch);
 *     hx_toolcall_parser *tp;
 *     if (hx_toolcall_init(&p, &tp, &err) != HX_OK) ...;
 *     for each text event: hx_toolcall_feed(tp, text, len, on_event, user);
 *     hx_toolcall_finish(tp, on_event, user);
 *     for (int32_t i = 0; i < hx_toolcall_count(tp); i++) use hx_toolcall_get(tp, i);
 *     hx_toolcall_free(tp);
 *
 * A parser belongs to one request and one thread at a time. */
#ifndef HX_SERVE_TOOLCALL_H
#define HX_SERVE_TOOLCALL_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* DeepSeek V3's markers (full-width bars and U+2581), as its template writes them. */
#define HX_DS_CALLS_BEGIN                                                                             \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "begin\xef\xbd\x9c>"
#define HX_DS_CALLS_END                                                                               \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "end\xef\xbd\x9c>"
#define HX_DS_CALL_BEGIN                                                                              \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "begin\xef\xbd\x9c>"
#define HX_DS_CALL_END                                                                                \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "end\xef\xbd\x9c>"
#define HX_DS_SEP                                                                                     \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "sep\xef\xbd\x9c>"

/* Markup still unfinished after this many bytes is content (a runaway or a plain JSON reply). */
#define HX_TOOLCALL_BODY_MAX (1u << 20)
/* Whitespace after a call is held back at most this long before it is content. */
#define HX_TOOLCALL_SPACING_MAX 256u

typedef enum {
    HX_TOOLCALL_GENERIC = 0,
    HX_TOOLCALL_HERMES = 1,
    HX_TOOLCALL_QWEN3_CODER = 2,
    HX_TOOLCALL_LLAMA3 = 3,
    HX_TOOLCALL_MISTRAL = 4,
    HX_TOOLCALL_GEMMA = 5,
    HX_TOOLCALL_DEEPSEEK_V3 = 6,
    HX_TOOLCALL_PYTHONIC = 7,
    HX_TOOLCALL_COUNT
} hx_toolcall_family;

/* "generic", "hermes", ...; "?" for a value out of range. */
const char *hx_toolcall_family_name(hx_toolcall_family f);

/* The family whose markup the chat template tpl renders for tool calls, judged from marker
 * strings in it; when the template says nothing (or is NULL), from the architecture name arch
 * (GGUF general.architecture, may be NULL); else GENERIC. Both borrowed. */
hx_toolcall_family hx_toolcall_detect(const char *tpl, const char *arch);

typedef enum {
    HX_TOOLCALL_EV_CONTENT = 0,    /* text, len: a run of content */
    HX_TOOLCALL_EV_CALL_START = 1, /* index, id, name */
    HX_TOOLCALL_EV_CALL_ARGS = 2,  /* index, text, len: the next fragment of the arguments JSON */
    HX_TOOLCALL_EV_CALL_END = 3,   /* index */
} hx_toolcall_ev_kind;

/* One event; every pointer is borrowed for the callback only. */
typedef struct {
    hx_toolcall_ev_kind kind;
    int32_t             index; /* the call's place in the reply, from 0 */
    const char         *id;    /* CALL_START: "call_<24 hex>" */
    const char         *name;  /* CALL_START: the function name */
    const char         *text;  /* CONTENT, CALL_ARGS */
    size_t              len;
} hx_toolcall_event;

/* Return false to stop: the feed or finish call then returns HX_E_CANCELLED. */
typedef bool (*hx_toolcall_cb)(void *user, const hx_toolcall_event *ev);

typedef struct {
    hx_toolcall_family family;
    uint64_t           seed; /* call ids are drawn from it; give each request its own */
} hx_toolcall_params;

hx_toolcall_params hx_toolcall_params_default(void); /* GENERIC, seed 0 */

/* A complete call, owned by the parser. */
typedef struct {
    char    id[32]; /* "call_<24 hex>" */
    char   *name;
    char   *arguments; /* compact JSON text of the arguments object, NUL-terminated */
    size_t  arguments_len;
    json_t *input; /* the same object (Anthropic tool_use "input"); borrowed */
} hx_toolcall;

typedef struct hx_toolcall_parser hx_toolcall_parser;

/* A new parser in *out (free with hx_toolcall_free). HX_E_INVALID for a family out of range,
 * HX_E_NOMEM. */
hx_status hx_toolcall_init(const hx_toolcall_params *p, hx_toolcall_parser **out, hx_err *err);
void      hx_toolcall_free(hx_toolcall_parser *tp); /* NULL: no-op */

/* Feeds text[0..len) and calls cb for every event now certain. HX_E_CANCELLED when cb returned
 * false, HX_E_NOMEM. */
hx_status hx_toolcall_feed(hx_toolcall_parser *tp, const char *text, size_t len, hx_toolcall_cb cb,
                           void *user);
/* Ends the reply: markup left unfinished is emitted as content, byte for byte. Feeding after
 * finish is a bug. */
hx_status hx_toolcall_finish(hx_toolcall_parser *tp, hx_toolcall_cb cb, void *user);

/* The calls recognised so far; each stays valid until hx_toolcall_free. */
int32_t            hx_toolcall_count(const hx_toolcall_parser *tp);
const hx_toolcall *hx_toolcall_get(const hx_toolcall_parser *tp, int32_t i);

#endif
