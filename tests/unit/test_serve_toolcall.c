/* test_serve_toolcall.c - conformance of the tool-call parsers and the reasoning splitter
 * (src/serve/toolcall.h, src/serve/reasoning.h).
 *
 * Every family gets hand-written replies in the markup its chat template renders: plain text,
 * text then one call, two calls, arguments with nested objects, braces and quotes inside strings
 * and non-ASCII text, a thinking block before a call. Each reply is fed whole, byte by byte and
 * cut at random points under several seeds, and must give the same events every time (adjacent
 * content runs, and argument fragments, are joined before comparing: how text is cut into runs
 * is not part of the contract). Malformed markup must come back as content equal to the input.
 * Family detection is checked on inline snippets and, when ../shared/data is present, on the
 * real templates. */
#include <jansson.h>

#include "base/alloc.h"
#include "check.h"
#include "serve/reasoning.h"
#include "serve/toolcall.h"

/* ---- event logs ---- */

/* The events as text: "|C:" content, "|R:" reasoning, "|S<i>:" name, "|A<i>:" arguments,
 * "|E<i>"; runs of the same kind are joined. full also carries the ids. */
typedef struct {
    char log[8192], full[8192];
    int  last; /* the kind of the last record, to join runs; -1: none */
    int  n_calls;
    bool bad;  /* an event broke the protocol (index out of order, args outside a call) */
    int  open; /* index of the call started and not yet ended, or -1 */
} ev_log;

static void log_init(ev_log *l)
{
    memset(l, 0, sizeof *l);
    l->last = -1;
    l->open = -1;
}

static void put(char *dst, const char *s, size_t n)
{
    const size_t have = strlen(dst), room = 8191 - have;
    if (n > room) n = room;
    memcpy(dst + have, s, n);
    dst[have + n] = '\0';
}

static void record(ev_log *l, int kind, const char *head, const char *text, size_t n)
{
    if (l->last != kind) {
        put(l->log, head, strlen(head));
        put(l->full, head, strlen(head));
    }
    put(l->log, text, n);
    put(l->full, text, n);
    l->last = kind;
}

static bool on_tc(void *user, const hx_toolcall_event *ev)
{
    ev_log *l = user;
    char    head[64];
    switch (ev->kind) {
    case HX_TOOLCALL_EV_CONTENT:
        if (l->open >= 0 || ev->len == 0) l->bad = true;
        record(l, 'C', "|C:", ev->text, ev->len);
        break;
    case HX_TOOLCALL_EV_CALL_START:
        if (l->open >= 0 || ev->index != l->n_calls) l->bad = true;
        l->open = ev->index;
        snprintf(head, sizeof head, "|S%d:", ev->index);
        put(l->log, head, strlen(head));
        put(l->log, ev->name, strlen(ev->name));
        snprintf(head, sizeof head, "|S%d:%s:", ev->index, ev->id);
        put(l->full, head, strlen(head));
        put(l->full, ev->name, strlen(ev->name));
        l->last = 'S';
        break;
    case HX_TOOLCALL_EV_CALL_ARGS:
        if (l->open != ev->index) l->bad = true;
        snprintf(head, sizeof head, "|A%d:", ev->index);
        record(l, 'A', head, ev->text, ev->len);
        break;
    case HX_TOOLCALL_EV_CALL_END:
        if (l->open != ev->index) l->bad = true;
        l->open = -1;
        l->n_calls++;
        snprintf(head, sizeof head, "|E%d", ev->index);
        put(l->log, head, strlen(head));
        put(l->full, head, strlen(head));
        l->last = 'E';
        break;
    }
    return true;
}

/* A reasoning splitter in front of a tool-call parser, as the server will chain them. */
typedef struct {
    ev_log             *l;
    hx_toolcall_parser *tp;
    hx_status           st;
} chain;

static bool on_reasoning(void *user, hx_reasoning_kind kind, const char *text, size_t len)
{
    chain *c = user;
    if (kind == HX_REASONING_REASONING) {
        record(c->l, 'R', "|R:", text, len);
        return true;
    }
    if (c->st == HX_OK) c->st = hx_toolcall_feed(c->tp, text, len, on_tc, c->l);
    return c->st == HX_OK;
}

enum { SPLIT_WHOLE = 0, SPLIT_BYTES = 1 }; /* other values: random cuts seeded by the value */

typedef struct {
    hx_toolcall_family family;
    bool               think;    /* run through a <think> splitter first */
    bool               in_think; /* the prompt opened the block */
} run_opts;

/* Feeds text cut by split through the parser(s) into l; then checks the summary against the
 * events. Returns 0 or 1 (with a message). */
static int run(const run_opts *o, const char *text, uint32_t split, ev_log *l)
{
    log_init(l);
    hx_err             err = {0};
    hx_toolcall_params p = hx_toolcall_params_default();
    p.family = o->family;
    p.seed = 42;
    hx_toolcall_parser *tp = NULL;
    hx_reasoning       *r = NULL;
    CHECK_EQ(hx_toolcall_init(&p, &tp, &err), HX_OK);
    if (o->think) {
        hx_reasoning_params rp = hx_reasoning_params_default();
        rp.in_reasoning = o->in_think;
        CHECK_EQ(hx_reasoning_init(&rp, &r, &err), HX_OK);
    }
    chain        c = {l, tp, HX_OK};
    const size_t n = strlen(text);
    uint32_t     rng = split;
    for (size_t i = 0; i < n;) {
        size_t k = split == SPLIT_WHOLE ? n : split == SPLIT_BYTES ? 1 : 1 + check_rng(&rng) % 9;
        if (k > n - i) k = n - i;
        if (r)
            CHECK_EQ(hx_reasoning_feed(r, text + i, k, on_reasoning, &c), HX_OK);
        else
            CHECK_EQ(hx_toolcall_feed(tp, text + i, k, on_tc, l), HX_OK);
        CHECK_EQ(c.st, HX_OK);
        i += k;
    }
    if (r) CHECK_EQ(hx_reasoning_finish(r, on_reasoning, &c), HX_OK);
    CHECK_EQ(c.st, HX_OK);
    CHECK_EQ(hx_toolcall_finish(tp, on_tc, l), HX_OK);
    CHECK(!l->bad && l->open == -1);
    /* The summary holds the same calls as the events, with input equal to the arguments. */
    CHECK_EQ(hx_toolcall_count(tp), l->n_calls);
    for (int32_t i = 0; i < hx_toolcall_count(tp); i++) {
        const hx_toolcall *call = hx_toolcall_get(tp, i);
        char               want[1024];
        snprintf(want, sizeof want, "|S%d:%s:%s|A%d:%s|E%d", i, call->id, call->name, i,
                 call->arguments, i);
        CHECK_CONTAINS(l->full, want);
        CHECK_EQ(strlen(call->id), 29);
        CHECK(strncmp(call->id, "call_", 5) == 0);
        CHECK_EQ(strspn(call->id + 5, "0123456789abcdef"), 24);
        json_t *a = json_loads(call->arguments, 0, NULL);
        CHECK(json_is_object(call->input) && json_equal(a, call->input));
        json_decref(a);
    }
    hx_reasoning_free(r);
    hx_toolcall_free(tp);
    return 0;
}

/* text gives want (the log without ids) whole, byte by byte and under six random cuttings, and
 * the same ids every time; nothing leaks. */
static int expect_opts(const run_opts *o, const char *text, const char *want)
{
    const size_t  live = hx_alloc_live_bytes();
    static ev_log first, l;
    if (run(o, text, SPLIT_WHOLE, &first)) return 1;
    CHECK_STR(first.log, want);
    const uint32_t splits[] = {SPLIT_BYTES, 1, 2, 3, 77, 1234, 99991};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        if (run(o, text, splits[i], &l)) CHECK_FAIL("split %u", splits[i]);
        if (strcmp(l.full, first.full) != 0)
            CHECK_FAIL("split %u:\n  got  %s\n  want %s", splits[i], l.full, first.full);
    }
    CHECK_EQ(hx_alloc_live_bytes(), live);
    return 0;
}

static int expect(hx_toolcall_family f, const char *text, const char *want)
{
    const run_opts o = {f, false, false};
    return expect_opts(&o, text, want);
}

/* Malformed markup comes back as content, byte for byte. */
static int expect_content(hx_toolcall_family f, const char *text)
{
    char want[4096];
    snprintf(want, sizeof want, "|C:%s", text);
    return expect(f, text, want);
}

#define EXPECT(f, text, want)                                                                      \
    do {                                                                                           \
        if (expect(f, text, want)) CHECK_FAIL("input: %s", text);                                  \
    } while (0)
#define EXPECT_CONTENT(f, text)                                                                    \
    do {                                                                                           \
        if (expect_content(f, text)) CHECK_FAIL("input: %s", text);                                \
    } while (0)

/* Shared arguments: nested objects, braces and quotes in a string, non-ASCII text. */
#define NESTED_IN                                                                                  \
    "{\"query\": {\"filter\": {\"tags\": [\"a\", \"b\"], \"limit\": 3}, "                          \
    "\"text\": \"say \\\"hi\\\" {not a brace} ]] \xc3\xbcn\xc3\xaf \xe6\x97\xa5\xe6\x9c\xac "      \
    "\xf0\x9f\x98\x80\"}, \"flag\": true}"
#define NESTED_OUT                                                                                 \
    "{\"query\":{\"filter\":{\"tags\":[\"a\",\"b\"],\"limit\":3},"                                 \
    "\"text\":\"say \\\"hi\\\" {not a brace} ]] \xc3\xbcn\xc3\xaf \xe6\x97\xa5\xe6\x9c\xac "       \
    "\xf0\x9f\x98\x80\"},\"flag\":true}"
#define PARIS_IN  "{\"city\": \"Paris\", \"unit\": \"celsius\"}"
#define PARIS_OUT "{\"city\":\"Paris\",\"unit\":\"celsius\"}"
#define TZ_IN     "{\"tz\": \"Europe/Paris\"}"
#define TZ_OUT    "{\"tz\":\"Europe/Paris\"}"

/* ---- plain text in every family ---- */

static int test_plain_text_passes_through_every_family(void)
{
    static const char *texts[] = {
        "Hello! How can I help you today?",
        ("Use <b>tags</b>, [brackets] [TOOL] or ```python\nprint(1)\n``` and {\"json\": 1} freely: "
         "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80 <\xef\xbd\x9c end <|tag"),
        "  \n",
        "ends with a marker prefix <tool_c",
    };
    for (int f = 0; f < HX_TOOLCALL_COUNT; f++)
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            if (expect_content((hx_toolcall_family)f, texts[i]))
                CHECK_FAIL("family %s, text %zu", hx_toolcall_family_name((hx_toolcall_family)f),
                           i);
        }
    return 0;
}

/* ---- Hermes (Qwen2.5, Qwen3) ---- */

static int test_hermes_calls(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_HERMES;
    EXPECT(f,
           "Let me check the weather.\n<tool_call>\n{\"name\": \"get_weather\", "
           "\"arguments\": " PARIS_IN "}\n</tool_call>",
           "|C:Let me check the weather.\n|S0:get_weather|A0:" PARIS_OUT "|E0");
    EXPECT(f,
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " PARIS_IN "}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": " TZ_IN "}\n</tool_call>",
           "|S0:get_weather|A0:" PARIS_OUT "|E0|S1:get_time|A1:" TZ_OUT "|E1");
    EXPECT(f, "<tool_call>\n{\"name\": \"search\", \"arguments\": " NESTED_IN "}\n</tool_call>\n",
           "|S0:search|A0:" NESTED_OUT "|E0");
    /* OpenAI-style arguments given as a JSON string. */
    EXPECT(f, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
           "|S0:f|A0:{\"a\":1}|E0");
    /* Text after a call stays content; the spacing before it too. */
    EXPECT(f, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\nDone.",
           "|S0:f|A0:{}|E0|C:\nDone.");
    return 0;
}

static int test_hermes_malformed_is_content(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_HERMES;
    EXPECT_CONTENT(f, "<tool_call>\n{\"name\": \"f\", \"arguments\": {bad}}\n</tool_call>");
    EXPECT_CONTENT(f, "Sure <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": ");
    EXPECT_CONTENT(f, "<tool_call>{\"foo\": 1}</tool_call>");
    EXPECT_CONTENT(f, "\n<tool_call>{\"name\": \"f\"}</tool_call>");
    /* A good call after a bad one is still a call. */
    EXPECT(f,
           "<tool_call>oops</tool_call><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
           "|C:<tool_call>oops</tool_call>|S0:f|A0:{}|E0");
    return 0;
}

static int test_think_block_then_call(void)
{
    const run_opts qwen = {HX_TOOLCALL_HERMES, true, false};
    if (expect_opts(
            &qwen,
            "<think>\nThe user wants the weather; call get_weather.\n</think>\n\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " PARIS_IN "}\n</tool_call>",
            "|R:\nThe user wants the weather; call get_weather.\n|S0:get_weather|A0:" PARIS_OUT
            "|E0"))
        return 1;
    /* DeepSeek-R1: the prompt opened the block, the reply starts inside it. */
    const run_opts r1 = {HX_TOOLCALL_DEEPSEEK_V3, true, true};
    if (expect_opts(
            &r1,
            "I need the weather in Paris.\n</think>\n\nLet me look.<｜tool▁calls▁begin｜>"
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" PARIS_IN
            "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "|R:I need the weather in Paris.\n|C:\n\nLet me look.|S0:get_weather|A0:" PARIS_OUT
            "|E0"))
        return 1;
    /* Markup inside the thinking block is reasoning, not a call. */
    const run_opts q3 = {HX_TOOLCALL_HERMES, true, false};
    return expect_opts(&q3, "<think>maybe <tool_call>{}</tool_call></think>No call.",
                       "|R:maybe <tool_call>{}</tool_call>|C:No call.");
}

/* ---- Qwen3-Coder (XML) ---- */

static int test_qwen3_coder_calls(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_QWEN3_CODER;
    EXPECT(
        f,
        "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        "|C:I'll check.\n|S0:get_weather|A0:{\"city\":\"Paris\",\"days\":3}|E0");
    EXPECT(
        f,
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
        "</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=tz>\nEurope/Paris\n"
        "</parameter>\n</function>\n</tool_call>",
        "|S0:get_weather|A0:{\"city\":\"Paris\"}|E0|S1:get_time|A1:" TZ_OUT "|E1");
    EXPECT(f,
           "<tool_call>\n<function=search>\n<parameter=query>\n{\"filter\": {\"tags\": [\"a\", "
           "\"b\"], "
           "\"limit\": 3}}\n</parameter>\n<parameter=note>\nsay \"hi\" {not a brace} </b>\n"
           "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\n</parameter>\n<parameter=flag>\ntrue\n"
           "</parameter>\n</function>\n</tool_call>",
           "|S0:search|A0:{\"query\":{\"filter\":{\"tags\":[\"a\",\"b\"],\"limit\":3}},"
           "\"note\":\"say \\\"hi\\\" {not a brace} </b>\\n\xe6\x97\xa5\xe6\x9c\xac "
           "\xf0\x9f\x98\x80\","
           "\"flag\":true}|E0");
    /* Without the <tool_call> wrapper. */
    EXPECT(f, "<function=ping>\n</function>", "|S0:ping|A0:{}|E0");
    return 0;
}

static int test_qwen3_coder_malformed_is_content(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_QWEN3_CODER;
    EXPECT_CONTENT(f, "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>");
    EXPECT_CONTENT(f, "ok <tool_call>\n<function=f>\n<parameter=x>\n1\n");
    EXPECT_CONTENT(f, "<tool_call>\n{\"name\": \"f\"}\n</tool_call>");
    return 0;
}

/* ---- Llama 3.1 / 3.2 (JSON) ---- */

static int test_llama3_calls(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_LLAMA3;
    EXPECT(f, "{\"name\": \"get_weather\", \"parameters\": " PARIS_IN "}",
           "|S0:get_weather|A0:" PARIS_OUT "|E0");
    EXPECT(f, "\n\n{\"name\": \"search\", \"parameters\": " NESTED_IN "}\n",
           "|S0:search|A0:" NESTED_OUT "|E0");
    EXPECT(f,
           "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": " PARIS_IN "}; "
           "{\"name\": \"get_time\", \"parameters\": " TZ_IN "}",
           "|S0:get_weather|A0:" PARIS_OUT "|E0|S1:get_time|A1:" TZ_OUT "|E1");
    EXPECT(f, "Checking.<|python_tag|>{\"name\": \"get_weather\", \"parameters\": " PARIS_IN "}",
           "|C:Checking.|S0:get_weather|A0:" PARIS_OUT "|E0");
    /* JSON in the middle of prose is prose. */
    EXPECT_CONTENT(f, "The object {\"name\": \"f\", \"parameters\": {}} is an example.");
    return 0;
}

static int test_llama3_malformed_is_content(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_LLAMA3;
    EXPECT_CONTENT(f, "{\"name\": \"f\", \"parameters\": {\"a\": 1}");
    EXPECT_CONTENT(f, "{\"not\": \"a call\"} and text");
    EXPECT_CONTENT(f, "<|python_tag|>brave_search.call(query=\"x\")");
    return 0;
}

/* ---- Mistral ---- */

static int test_mistral_calls(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_MISTRAL;
    EXPECT(f, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " PARIS_IN "}]",
           "|S0:get_weather|A0:" PARIS_OUT "|E0");
    EXPECT(f,
           "I'll check.[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": " PARIS_IN "}, "
           "{\"name\": \"get_time\", \"arguments\": " TZ_IN "}]",
           "|C:I'll check.|S0:get_weather|A0:" PARIS_OUT "|E0|S1:get_time|A1:" TZ_OUT "|E1");
    EXPECT(f,
           "[TOOL_CALLS]get_weather[ARGS]" PARIS_IN
           "[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS]" TZ_IN,
           "|S0:get_weather|A0:" PARIS_OUT "|E0|S1:get_time|A1:" TZ_OUT "|E1");
    EXPECT(f, "[TOOL_CALLS]search[ARGS]" NESTED_IN, "|S0:search|A0:" NESTED_OUT "|E0");
    return 0;
}

static int test_mistral_malformed_is_content(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_MISTRAL;
    EXPECT_CONTENT(f, "[TOOL_CALLS]get weather[ARGS]{}");
    EXPECT_CONTENT(f, "[TOOL_CALLS][{\"name\": 1}]");
    EXPECT_CONTENT(f, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Par");
    EXPECT_CONTENT(f, "[TOOL_CALLS]get_weather");
    return 0;
}

/* ---- Gemma (tool_code) ---- */

static int test_gemma_calls(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_GEMMA;
    EXPECT(f,
           "I'll look that up.\n```tool_code\nget_weather(city=\"Paris\", unit=\"celsius\")\n```",
           "|C:I'll look that up.\n|S0:get_weather|A0:" PARIS_OUT "|E0");
    EXPECT(f,
           "```tool_code\nget_weather(city=\"Paris\", unit='celsius')\n"
           "get_time(tz=\"Europe/Paris\", precise=True, offset=None, n=2)\n```\n",
           "|S0:get_weather|A0:" PARIS_OUT "|E0|S1:get_time|A1:{\"tz\":\"Europe/Paris\","
           "\"precise\":true,\"offset\":null,\"n\":2}|E1");
    EXPECT(f,
           "```tool_code\nsearch(query={\"filter\": {\"tags\": [\"a\", \"b\"], \"limit\": 3}, "
           "\"text\": \"say \\\"hi\\\" {not a brace} ]] \xc3\xbcn\xc3\xaf \xe6\x97\xa5\xe6\x9c\xac "
           "\xf0\x9f\x98\x80\"}, flag=True)\n```",
           "|S0:search|A0:" NESTED_OUT "|E0");
    return 0;
}

static int test_gemma_malformed_is_content(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_GEMMA;
    EXPECT_CONTENT(f, "```tool_code\nprint('hi')\n```");
    EXPECT_CONTENT(f, "```tool_code\nget_weather(city=\"Paris\"");
    return 0;
}

/* ---- pythonic lists (Llama 3.2/4, Gemma 3 pythonic templates) ---- */

static int test_pythonic_calls(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_PYTHONIC;
    EXPECT(f, "[get_weather(city=\"Paris\", unit=\"celsius\")]",
           "|S0:get_weather|A0:" PARIS_OUT "|E0");
    EXPECT(f, "\n[get_weather(city='Paris', unit='celsius'), get_time(tz=\"Europe/Paris\")]\n",
           "|S0:get_weather|A0:" PARIS_OUT "|E0|S1:get_time|A1:" TZ_OUT "|E1");
    EXPECT(
        f,
        "[search(query={\"filter\": {\"tags\": [\"a\", \"b\"], \"limit\": 3}, \"text\": \"say "
        "\\\"hi\\\" {not a brace} ]] \xc3\xbcn\xc3\xaf \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\"}"
        ", flag=True)]",
        "|S0:search|A0:" NESTED_OUT "|E0");
    EXPECT(f, "[ping()] Done.", "|S0:ping|A0:{}|E0|C: Done.");
    return 0;
}

static int test_pythonic_malformed_is_content(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_PYTHONIC;
    EXPECT_CONTENT(f, "[1, 2, 3]");
    EXPECT_CONTENT(f, "[get_weather(city=\"Paris\"");
    EXPECT_CONTENT(f, "[get_weather(city=Paris)]");
    EXPECT_CONTENT(f, "Here: [get_weather(city=\"Paris\")]"); /* a list in prose is prose */
    return 0;
}

/* ---- DeepSeek V3 ---- */

#define DS_CALL(name, args)                                                                        \
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" name "\n```json\n" args "\n```<"                 \
    "｜tool▁call▁end｜>"

static int test_deepseek_v3_calls(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_DEEPSEEK_V3;
    EXPECT(
        f,
        "Checking.<｜tool▁calls▁begin｜>" DS_CALL("get_weather", PARIS_IN) "<｜tool▁calls▁end｜>",
        "|C:Checking.|S0:get_weather|A0:" PARIS_OUT "|E0");
    EXPECT(f,
           "<｜tool▁calls▁begin｜>" DS_CALL("get_weather", PARIS_IN) "\n" DS_CALL(
               "get_time", TZ_IN) "<｜tool▁calls▁end｜>",
           "|S0:get_weather|A0:" PARIS_OUT "|E0|S1:get_time|A1:" TZ_OUT "|E1");
    EXPECT(f, "<｜tool▁calls▁begin｜>" DS_CALL("search", NESTED_IN) "<｜tool▁calls▁end｜>",
           "|S0:search|A0:" NESTED_OUT "|E0");
    /* V3.1 puts the name before the separator and no fence. */
    EXPECT(f,
           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" PARIS_IN
           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
           "|S0:get_weather|A0:" PARIS_OUT "|E0");
    return 0;
}

static int test_deepseek_v3_malformed_is_content(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_DEEPSEEK_V3;
    EXPECT_CONTENT(f, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather" PARIS_IN
                      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
    EXPECT_CONTENT(f, "x<｜tool▁calls▁begin｜>" DS_CALL("get_weather", PARIS_IN));
    return 0;
}

/* ---- generic ---- */

static int test_generic_calls(void)
{
    const hx_toolcall_family f = HX_TOOLCALL_GENERIC;
    EXPECT(f, "{\"name\": \"get_weather\", \"arguments\": " PARIS_IN "}",
           "|S0:get_weather|A0:" PARIS_OUT "|E0");
    EXPECT(f,
           "<tool_call>{\"name\": \"get_weather\", \"arguments\": " PARIS_IN "}</tool_call>"
           "<tool_call>{\"name\": \"search\", \"arguments\": " NESTED_IN "}</tool_call>",
           "|S0:get_weather|A0:" PARIS_OUT "|E0|S1:search|A1:" NESTED_OUT "|E1");
    EXPECT_CONTENT(f, "{\"answer\": 42}");
    EXPECT_CONTENT(f, "{\"name\": \"f\", \"arguments\": ");
    return 0;
}

/* ---- parser properties ---- */

/* Random soups of markup pieces, valid and not: every cutting gives the events of the whole
 * reply, and a reply without calls comes back as content equal to it. */
static int test_random_markup_soup_agrees_under_every_cutting(void)
{
    static const char *pieces[] = {
        "<tool_call>",
        "</tool_call>",
        "{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}",
        "{",
        "}",
        "\"",
        "text ",
        "\n",
        " ",
        "[TOOL_CALLS]",
        "f[ARGS]",
        "[CALL_ID]x1",
        "[{\"name\": \"g\", \"arguments\": {}}]",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
        "function",
        "```tool_code\n",
        "```",
        "f(a=1)",
        "<function=f>",
        "<parameter=p>",
        "</parameter>",
        "</function>",
        "<|python_tag|>",
        ";",
        "\xe6\x97\xa5\xe6\x9c\xac",
        "<",
        "[",
        "{\"name\": \"h\", \"parameters\": {}}",
    };
    const size_t  n_pieces = sizeof pieces / sizeof pieces[0];
    uint32_t      rng = 2024;
    static char   text[2048];
    static ev_log whole, l;
    for (int iter = 0; iter < 300; iter++) {
        text[0] = '\0';
        const int n = 1 + (int)(check_rng(&rng) % 12);
        for (int k = 0; k < n; k++)
            strcat(text, pieces[check_rng(&rng) % n_pieces]);
        const run_opts o = {(hx_toolcall_family)(iter % HX_TOOLCALL_COUNT), false, false};
        if (run(&o, text, SPLIT_WHOLE, &whole)) CHECK_FAIL("input: %s", text);
        if (whole.n_calls == 0 &&
            (strncmp(whole.log, "|C:", 3) != 0 || strcmp(whole.log + 3, text) != 0))
            CHECK_FAIL("%s: \"%s\" lost text: %s", hx_toolcall_family_name(o.family), text,
                       whole.log);
        for (uint32_t split = 1; split < 5; split++) {
            if (run(&o, text, split, &l)) CHECK_FAIL("input: %s", text);
            if (strcmp(l.full, whole.full) != 0)
                CHECK_FAIL("%s, split %u: \"%s\"\n  got  %s\n  want %s",
                           hx_toolcall_family_name(o.family), split, text, l.full, whole.full);
        }
    }
    return 0;
}

/* Content streams out as it arrives: only a marker prefix (and a cut character) is held. */
static int test_held_back_text_is_bounded(void)
{
    hx_toolcall_params p = hx_toolcall_params_default();
    p.family = HX_TOOLCALL_DEEPSEEK_V3;
    hx_toolcall_parser *tp = NULL;
    CHECK_EQ(hx_toolcall_init(&p, &tp, NULL), HX_OK);
    static ev_log l;
    log_init(&l);
    const char *text = "plain text with <b>tags</b> and \xe6\x97\xa5\xe6\x9c\xac, repeated. ";
    size_t      fed = 0;
    for (int rep = 0; rep < 40; rep++)
        for (size_t i = 0; text[i]; i++) {
            CHECK_EQ(hx_toolcall_feed(tp, text + i, 1, on_tc, &l), HX_OK);
            fed++;
            CHECK(fed - (strlen(l.log) - 3) <= 28); /* 28: the longest DeepSeek marker */
            if (fed > 2000) break;
        }
    hx_toolcall_free(tp);
    return 0;
}

/* Byte counts per event kind, for replies too long for an ev_log. */
typedef struct {
    size_t content, args, content_before_finish;
    int    calls;
} ev_count;

static bool on_count(void *user, const hx_toolcall_event *ev)
{
    ev_count *c = user;
    if (ev->kind == HX_TOOLCALL_EV_CONTENT) c->content += ev->len;
    if (ev->kind == HX_TOOLCALL_EV_CALL_ARGS) c->args += ev->len;
    if (ev->kind == HX_TOOLCALL_EV_CALL_END) c->calls++;
    return true;
}

/* Feeds text in chunks of 3 bytes and counts the events. */
static int feed_counted(hx_toolcall_family f, const char *text, size_t n, ev_count *c)
{
    hx_toolcall_params  p = {f, 3};
    hx_toolcall_parser *tp = NULL;
    memset(c, 0, sizeof *c);
    CHECK_EQ(hx_toolcall_init(&p, &tp, NULL), HX_OK);
    for (size_t i = 0; i < n; i += 3)
        CHECK_EQ(hx_toolcall_feed(tp, text + i, n - i < 3 ? n - i : 3, on_count, c), HX_OK);
    c->content_before_finish = c->content;
    CHECK_EQ(hx_toolcall_finish(tp, on_count, c), HX_OK);
    hx_toolcall_free(tp);
    return 0;
}

/* A long argument arrives token by token without rescanning the call each time (the test would
 * take minutes if it did), and markup past HX_TOOLCALL_BODY_MAX is given up on as content. */
static int test_long_calls_are_linear_and_bounded(void)
{
    const size_t big = 600000, huge = HX_TOOLCALL_BODY_MAX + 1000;
    char        *text = malloc(huge + 100);
    CHECK(text != NULL);
    const char *head = "<tool_call>{\"name\": \"write\", \"arguments\": {\"data\": \"";
    const char *tail = "\"}}</tool_call>";
    strcpy(text, head);
    memset(text + strlen(head), 'a', big);
    strcpy(text + strlen(head) + big, tail);
    ev_count c;
    if (feed_counted(HX_TOOLCALL_HERMES, text, strlen(text), &c)) return 1;
    CHECK_EQ(c.calls, 1);
    CHECK_EQ(c.content, 0);
    CHECK_EQ(c.args, big + strlen("{\"data\":\"\"}"));
    strcpy(text, "<tool_call>{\"a\": \"");
    memset(text + strlen(text), 'b', huge);
    text[strlen("<tool_call>{\"a\": \"") + huge] = '\0';
    if (feed_counted(HX_TOOLCALL_HERMES, text, strlen(text), &c)) return 1;
    CHECK_EQ(c.calls, 0);
    CHECK_EQ(c.content, strlen(text));
    CHECK(c.content_before_finish >= HX_TOOLCALL_BODY_MAX); /* given up on while streaming */
    /* Long spacing after a call is not held forever, and still comes out whole. */
    strcpy(text, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
    const size_t call_len = strlen(text);
    memset(text + call_len, ' ', 1000);
    strcpy(text + call_len + 1000, "x");
    if (feed_counted(HX_TOOLCALL_HERMES, text, strlen(text), &c)) return 1;
    CHECK_EQ(c.calls, 1);
    CHECK_EQ(c.content, 1001);
    free(text);
    return 0;
}

static int test_ids_follow_the_seed(void)
{
    const char    *text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"
                          "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>";
    char           ids[3][2][32];
    const uint64_t seeds[3] = {7, 7, 8};
    for (int k = 0; k < 3; k++) {
        hx_toolcall_params  p = {HX_TOOLCALL_HERMES, seeds[k]};
        hx_toolcall_parser *tp = NULL;
        static ev_log       l;
        log_init(&l);
        CHECK_EQ(hx_toolcall_init(&p, &tp, NULL), HX_OK);
        CHECK_EQ(hx_toolcall_feed(tp, text, strlen(text), on_tc, &l), HX_OK);
        CHECK_EQ(hx_toolcall_finish(tp, on_tc, &l), HX_OK);
        CHECK_EQ(hx_toolcall_count(tp), 2);
        for (int i = 0; i < 2; i++)
            snprintf(ids[k][i], 32, "%s", hx_toolcall_get(tp, i)->id);
        hx_toolcall_free(tp);
    }
    CHECK_STR(ids[0][0], ids[1][0]);
    CHECK_STR(ids[0][1], ids[1][1]);
    CHECK(strcmp(ids[0][0], ids[0][1]) != 0);
    CHECK(strcmp(ids[0][0], ids[2][0]) != 0);
    return 0;
}

static bool stop_at_call(void *user, const hx_toolcall_event *ev)
{
    (void)user;
    return ev->kind != HX_TOOLCALL_EV_CALL_START;
}

static int test_callback_false_cancels_and_bad_family_is_invalid(void)
{
    hx_toolcall_params  p = {HX_TOOLCALL_HERMES, 1};
    hx_toolcall_parser *tp = NULL;
    CHECK_EQ(hx_toolcall_init(&p, &tp, NULL), HX_OK);
    const char *text = "a<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    CHECK_EQ(hx_toolcall_feed(tp, text, strlen(text), stop_at_call, NULL), HX_E_CANCELLED);
    hx_toolcall_free(tp);
    hx_toolcall_free(NULL);
    p.family = HX_TOOLCALL_COUNT;
    hx_err err = {0};
    CHECK_EQ(hx_toolcall_init(&p, &tp, &err), HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "family");
    return 0;
}

static int test_out_of_memory_is_reported(void)
{
    hx_toolcall_params  p = {HX_TOOLCALL_HERMES, 1};
    hx_toolcall_parser *tp = NULL;
    hx_err              err = {0};
    hx_alloc_fail_after(0);
    const hx_status st = hx_toolcall_init(&p, &tp, &err);
    hx_alloc_fail_after(-1);
    CHECK_EQ(st, HX_E_NOMEM);
    const size_t live = hx_alloc_live_bytes();
    CHECK_EQ(hx_toolcall_init(&p, &tp, &err), HX_OK);
    static ev_log l;
    log_init(&l);
    const char *text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    hx_alloc_fail_after(1);
    const hx_status fs = hx_toolcall_feed(tp, text, strlen(text), on_tc, &l);
    hx_alloc_fail_after(-1);
    CHECK_EQ(fs, HX_E_NOMEM);
    hx_toolcall_free(tp);
    CHECK_EQ(hx_alloc_live_bytes(), live);
    return 0;
}

/* ---- family detection ---- */

static int test_family_detection_from_snippets(void)
{
    CHECK_EQ(hx_toolcall_detect("{{- '<tool_call>\\n' + tool_call | tojson + '\\n</tool_call>' }}",
                                NULL),
             HX_TOOLCALL_HERMES);
    CHECK_EQ(hx_toolcall_detect("<tool_call>\\n<function=example_function_name>", NULL),
             HX_TOOLCALL_QWEN3_CODER);
    CHECK_EQ(hx_toolcall_detect("{{- \"Environment: ipython\\n\" }}", NULL), HX_TOOLCALL_LLAMA3);
    CHECK_EQ(hx_toolcall_detect("{{- '<|python_tag|>' + tool_call.name }}", NULL),
             HX_TOOLCALL_LLAMA3);
    CHECK_EQ(hx_toolcall_detect("{{- '[TOOL_CALLS]' + tool_call.function.name + '[ARGS]' }}", NULL),
             HX_TOOLCALL_MISTRAL);
    CHECK_EQ(hx_toolcall_detect("```tool_code\\n{{ call }}\\n```", NULL), HX_TOOLCALL_GEMMA);
    CHECK_EQ(hx_toolcall_detect("Respond in the format [func_name1(params_name1=params_value1, "
                                "params_name2=params_value2...), func_name2(params)]",
                                NULL),
             HX_TOOLCALL_PYTHONIC);
    CHECK_EQ(hx_toolcall_detect("{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'}}", NULL),
             HX_TOOLCALL_DEEPSEEK_V3);
    CHECK_EQ(hx_toolcall_detect("{{ '<|im_start|>' + message.role }}", NULL), HX_TOOLCALL_GENERIC);
    CHECK_EQ(hx_toolcall_detect(NULL, "qwen3"), HX_TOOLCALL_HERMES);
    CHECK_EQ(hx_toolcall_detect("", "gemma3"), HX_TOOLCALL_GEMMA);
    CHECK_EQ(hx_toolcall_detect(NULL, NULL), HX_TOOLCALL_GENERIC);
    CHECK_STR(hx_toolcall_family_name(HX_TOOLCALL_QWEN3_CODER), "qwen3_coder");
    CHECK_STR(hx_toolcall_family_name(HX_TOOLCALL_COUNT), "?");
    return 0;
}

/* The whole file at dir/name, NUL-terminated (caller frees), or NULL. */
static char *slurp(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/templates/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = '\0';
    fclose(f);
    return s;
}

static int test_family_detection_from_real_templates(void)
{
    const char *dir = check_shared_data();
    if (!dir) return 0;
    static const struct {
        const char        *file;
        hx_toolcall_family want;
    } cases[] = {
        {"qwen3-0.6b.jinja", HX_TOOLCALL_HERMES},
        {"qwen2.5-instruct-chujiezheng.jinja", HX_TOOLCALL_HERMES},
        {"qwq-32b.jinja", HX_TOOLCALL_HERMES},
        {"hermes-2-pro-llama-3-8b-tool_use.jinja", HX_TOOLCALL_HERMES},
        {"qwen3-coder-30b-a3b-instruct.jinja", HX_TOOLCALL_QWEN3_CODER},
        {"llama-3.1-tool-json-vllm.jinja", HX_TOOLCALL_LLAMA3},
        {"llama-3.2-3b-instruct.jinja", HX_TOOLCALL_LLAMA3},
        {"mistral-small-3.2-24b-instruct-2506.jinja", HX_TOOLCALL_MISTRAL},
        {"devstral-small-2507-unsloth.jinja", HX_TOOLCALL_MISTRAL},
        {"deepseek-v3-tool-vllm.jinja", HX_TOOLCALL_DEEPSEEK_V3},
        {"deepseek-v3.1.jinja", HX_TOOLCALL_DEEPSEEK_V3},
        {"llama-3.2-tool-pythonic-vllm.jinja", HX_TOOLCALL_PYTHONIC},
        {"llama-4-tool-pythonic-vllm.jinja", HX_TOOLCALL_PYTHONIC},
        {"gemma-3-tool-pythonic-vllm.jinja", HX_TOOLCALL_PYTHONIC},
        {"chatml.jinja", HX_TOOLCALL_GENERIC},
    };
    int seen = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *tpl = slurp(dir, cases[i].file);
        if (!tpl) {
            printf("skip: %s is absent\n", cases[i].file);
            continue;
        }
        const hx_toolcall_family got = hx_toolcall_detect(tpl, NULL);
        free(tpl);
        if (got != cases[i].want)
            CHECK_FAIL("%s: %s vs %s", cases[i].file, hx_toolcall_family_name(got),
                       hx_toolcall_family_name(cases[i].want));
        seen++;
    }
    CHECK(seen > 0);
    return 0;
}

/* ---- reasoning splitter ---- */

static bool on_r(void *user, hx_reasoning_kind kind, const char *text, size_t len)
{
    ev_log *l = user;
    if (len == 0) l->bad = true;
    record(l, kind == HX_REASONING_REASONING ? 'R' : 'C',
           kind == HX_REASONING_REASONING ? "|R:" : "|C:", text, len);
    return true;
}

/* Splits text with p cut every way and expects want; every run must be whole UTF-8. */
static int expect_split(const hx_reasoning_params *p, const char *text, const char *want)
{
    const size_t n = strlen(text);
    for (uint32_t split = 0; split < 8; split++) {
        hx_reasoning *r = NULL;
        CHECK_EQ(hx_reasoning_init(p, &r, NULL), HX_OK);
        static ev_log l;
        log_init(&l);
        uint32_t rng = split * 31 + 5;
        for (size_t i = 0; i < n;) {
            size_t k = split == 0 ? n : split == 1 ? 1 : 1 + check_rng(&rng) % 6;
            if (k > n - i) k = n - i;
            CHECK_EQ(hx_reasoning_feed(r, text + i, k, on_r, &l), HX_OK);
            i += k;
        }
        CHECK_EQ(hx_reasoning_finish(r, on_r, &l), HX_OK);
        hx_reasoning_free(r);
        CHECK(!l.bad);
        if (strcmp(l.log, want) != 0) CHECK_FAIL("split %u: \"%s\" vs \"%s\"", split, l.log, want);
    }
    return 0;
}

#define EXPECT_SPLIT(p, text, want)                                                                \
    do {                                                                                           \
        if (expect_split(p, text, want)) CHECK_FAIL("input: %s", text);                            \
    } while (0)

static int test_reasoning_splits_think_blocks(void)
{
    hx_reasoning_params p = hx_reasoning_params_default();
    EXPECT_SPLIT(&p, "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
                 "|R:\nLet me think.\n|C:\n\nThe answer is 4.");
    EXPECT_SPLIT(&p, "No thinking here, just <b>bold</b> and a < sign.",
                 "|C:No thinking here, just <b>bold</b> and a < sign.");
    EXPECT_SPLIT(&p, "<think>\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80</think>\xc3\xbc",
                 "|R:\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80|C:\xc3\xbc");
    /* An unfinished tag at the end is text, and so is an unclosed block's content. */
    EXPECT_SPLIT(&p, "Answer </thi", "|C:Answer </thi");
    EXPECT_SPLIT(&p, "<think>still thinking <", "|R:still thinking <");
    p.in_reasoning = true;
    EXPECT_SPLIT(&p, "I should add.\n</think>\n\n4", "|R:I should add.\n|C:\n\n4");
    p.in_reasoning = false;
    p.open = "[THINK]";
    p.close = "[/THINK]";
    EXPECT_SPLIT(&p, "[THINK]hmm[/THINK]Done.", "|R:hmm|C:Done.");
    return 0;
}

static int test_reasoning_prompt_and_template_tags(void)
{
    hx_reasoning_params p = hx_reasoning_params_default();
    const char         *r1 = "<｜User｜>hi<｜Assistant｜><think>\n";
    const char         *q3 = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    CHECK(hx_reasoning_prompt_opens(r1, strlen(r1), &p));
    CHECK(!hx_reasoning_prompt_opens(q3, strlen(q3), &p));
    CHECK(!hx_reasoning_prompt_opens("", 0, &p));
    CHECK(hx_reasoning_tags_for_template("{{ '[THINK]' + thinking + '[/THINK]' }}", &p));
    CHECK_STR(p.open, "[THINK]");
    CHECK(!hx_reasoning_tags_for_template("{{ '<|im_start|>' }}", &p));
    CHECK_STR(p.close, "</think>");
    hx_err        err = {0};
    hx_reasoning *r = NULL;
    p.open = "";
    CHECK_EQ(hx_reasoning_init(&p, &r, &err), HX_E_INVALID);
    CHECK(r == NULL);
    p = hx_reasoning_params_default();
    p.in_reasoning = true;
    CHECK_EQ(hx_reasoning_init(&p, &r, &err), HX_OK);
    CHECK(hx_reasoning_inside(r));
    hx_reasoning_free(r);
    const char *dir = check_shared_data();
    if (!dir) return 0;
    char *tpl = slurp(dir, "ministral-3-14b-reasoning-2512.jinja");
    if (tpl) {
        p = hx_reasoning_params_default();
        CHECK(hx_reasoning_tags_for_template(tpl, &p));
        CHECK_STR(p.open, "[THINK]");
        free(tpl);
    }
    tpl = slurp(dir, "qwen3-0.6b.jinja");
    if (tpl) {
        p = hx_reasoning_params_default();
        CHECK(hx_reasoning_tags_for_template(tpl, &p));
        CHECK_STR(p.open, "<think>");
        free(tpl);
    }
    return 0;
}

/* One case per line: CMake reads the names from these lines. */
/* clang-format off */
static const check_case cases[] = {
    { "plain_text_passes_through_every_family",           test_plain_text_passes_through_every_family },
    { "hermes_calls",                                     test_hermes_calls },
    { "hermes_malformed_is_content",                      test_hermes_malformed_is_content },
    { "think_block_then_call",                            test_think_block_then_call },
    { "qwen3_coder_calls",                                test_qwen3_coder_calls },
    { "qwen3_coder_malformed_is_content",                 test_qwen3_coder_malformed_is_content },
    { "llama3_calls",                                     test_llama3_calls },
    { "llama3_malformed_is_content",                      test_llama3_malformed_is_content },
    { "mistral_calls",                                    test_mistral_calls },
    { "mistral_malformed_is_content",                     test_mistral_malformed_is_content },
    { "gemma_calls",                                      test_gemma_calls },
    { "gemma_malformed_is_content",                       test_gemma_malformed_is_content },
    { "pythonic_calls",                                   test_pythonic_calls },
    { "pythonic_malformed_is_content",                    test_pythonic_malformed_is_content },
    { "deepseek_v3_calls",                                test_deepseek_v3_calls },
    { "deepseek_v3_malformed_is_content",                 test_deepseek_v3_malformed_is_content },
    { "generic_calls",                                    test_generic_calls },
    { "random_markup_soup_agrees_under_every_cutting",    test_random_markup_soup_agrees_under_every_cutting },
    { "held_back_text_is_bounded",                        test_held_back_text_is_bounded },
    { "long_calls_are_linear_and_bounded",                test_long_calls_are_linear_and_bounded },
    { "ids_follow_the_seed",                              test_ids_follow_the_seed },
    { "callback_false_cancels_and_bad_family_is_invalid", test_callback_false_cancels_and_bad_family_is_invalid },
    { "out_of_memory_is_reported",                        test_out_of_memory_is_reported },
    { "family_detection_from_snippets",                   test_family_detection_from_snippets },
    { "family_detection_from_real_templates",             test_family_detection_from_real_templates },
    { "reasoning_splits_think_blocks",                    test_reasoning_splits_think_blocks },
    { "reasoning_prompt_and_template_tags",               test_reasoning_prompt_and_template_tags },
};
/* clang-format on */
CHECK_MAIN(cases)
