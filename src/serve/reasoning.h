/* reasoning.h - splits a model's generated text into reasoning and content, incrementally.
 *
 * Reasoning models wrap their chain of thought in a tag pair (<think>...</think> for Qwen3,
 * QwQ and DeepSeek-R1; [THINK]...[/THINK] for Magistral/Ministral reasoning; <seed:think> for
 * Seed-OSS). The splitter sits between the executor's text events and the wire formatting: feed
 * it chunks split anywhere (inside a tag or a UTF-8 character) and it calls back with runs of
 * reasoning or content text, in order, with the tags removed. It never emits part of a tag: a
 * possible tag prefix is held back (at most the tag's length) until it resolves, and flushed as
 * text by hx_reasoning_finish when it never completed. It also holds back an incomplete UTF-8
 * sequence at a chunk's end, so every run is whole characters when the input is. Text inside
 * the blocks is passed through exactly (no trimming of the newlines templates put around tags).
 *
 * Usage:
 *     hx_reasoning_params p = hx_reasoning_params_default();
 *     hx_reasoning_tags_for_template(tpl, &p);
 *     p.in_reasoning = hx_reasoning_prompt_opens(prompt, prompt_len, &p);
 *     hx_reasoning *r;
 *     if (hx_reasoning_init(&p, &r, &err) != HX_OK) ...;
 *     for each text event: hx_reasoning_feed(r, text, len, on_run, user);
 *     hx_reasoning_finish(r, on_run, user);
 *     hx_reasoning_free(r);
 *
 * A splitter belongs to one request and one thread at a time. */
#ifndef HX_SERVE_REASONING_H
#define HX_SERVE_REASONING_H
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* Longest tag accepted, in bytes. */
#define HX_REASONING_TAG_MAX 31

typedef enum {
    HX_REASONING_CONTENT = 0,   /* the reply proper */
    HX_REASONING_REASONING = 1, /* text inside the thinking block */
} hx_reasoning_kind;

/* One run of text (text[0..len), len > 0, borrowed for the call only). Return false to stop:
 * the feed or finish call then returns HX_E_CANCELLED. */
typedef bool (*hx_reasoning_cb)(void *user, hx_reasoning_kind kind, const char *text, size_t len);

typedef struct {
    const char *open;         /* the opening tag, copied by init; default "<think>" */
    const char *close;        /* the closing tag; default "</think>" */
    bool        in_reasoning; /* the prompt already opened the block: start inside it */
} hx_reasoning_params;

hx_reasoning_params hx_reasoning_params_default(void);

/* Sets p->open and p->close to the tag pair the chat template tpl (borrowed, may be NULL) uses.
 * Returns true when the template mentions a thinking block at all; p keeps <think>/</think> when
 * it does not, so a caller may still split a model that thinks without saying so. */
bool hx_reasoning_tags_for_template(const char *tpl, hx_reasoning_params *p);

/* True when the rendered prompt prompt[0..len) ends inside an open thinking block (its last open
 * tag comes after its last close tag), as DeepSeek-R1's and QwQ's generation prompts do: the
 * generated text then starts as reasoning. */
bool hx_reasoning_prompt_opens(const char *prompt, size_t len, const hx_reasoning_params *p);

typedef struct hx_reasoning hx_reasoning;

/* A new splitter in *out (free with hx_reasoning_free). HX_E_INVALID when a tag is empty or
 * longer than HX_REASONING_TAG_MAX; HX_E_NOMEM. */
hx_status hx_reasoning_init(const hx_reasoning_params *p, hx_reasoning **out, hx_err *err);
void      hx_reasoning_free(hx_reasoning *r); /* NULL: no-op */

/* Feeds text[0..len) and calls cb for every run now certain. HX_E_CANCELLED when cb returned
 * false, HX_E_NOMEM. */
hx_status hx_reasoning_feed(hx_reasoning *r, const char *text, size_t len, hx_reasoning_cb cb,
                            void *user);
/* Flushes what was held back (a tag prefix that never completed is text of the current kind).
 * Feeding after finish is a bug. */
hx_status hx_reasoning_finish(hx_reasoning *r, hx_reasoning_cb cb, void *user);

/* True while the splitter is inside a thinking block. */
bool hx_reasoning_inside(const hx_reasoning *r);

#endif
