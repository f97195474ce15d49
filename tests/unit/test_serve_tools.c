/* test_serve_tools.c - the tools of a chat request (src/serve/tools.h).
 *
 * Normalizing and tool_choice are checked per request shape, errors included. Call grammars are
 * checked for every family against that family's parser: two tools with different schemas, hand-
 * written replies in the family's markup that the grammar must accept byte by byte and that the
 * parser must read as the same calls (names equal, arguments json_equal), and replies the grammar
 * must refuse (another tool name, a missing required argument, a wrong type, text before the
 * call, two calls without parallel, a tool other than the named one). Template detection runs on
 * snippets and, when ../shared/data is present, on real chat templates; folding is checked by
 * parsing the folded calls back and by feeding them to the grammar. */
#include <jansson.h>

#include "base/alloc.h"
#include "check.h"
#include "sample/grammar.h"
#include "serve/toolcall.h"
#include "serve/tools.h"

/* ---- fixtures ---- */

/* Two tools: one with a required string and integer and an enum, one with a nested object and an
 * array. */
static const char *const TOOLS_JSON =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
    "\"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, "
    "\"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, "
    "\"required\": [\"city\", \"days\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"search\", \"parameters\": {"
    "\"type\": \"object\", \"properties\": {\"filter\": {\"type\": \"object\", \"properties\": {"
    "\"lang\": {\"type\": \"string\"}, \"year\": {\"type\": \"integer\"}}, "
    "\"required\": [\"lang\"]}, \"tags\": {\"type\": \"array\", \"items\": {\"type\": "
    "\"string\"}}}, \"required\": [\"filter\"]}}}]";

#define WEATHER_ARGS "{\"city\": \"Paris\", \"days\": 3, \"unit\": \"celsius\"}"
#define SEARCH_ARGS  "{\"filter\": {\"lang\": \"en\", \"year\": 2024}, \"tags\": [\"a\", \"b\"]}"

static json_t *load(const char *text)
{
    json_error_t e;
    json_t      *v = json_loads(text, JSON_DECODE_ANY, &e);
    if (!v) fprintf(stderr, "fixture: %s at %d:%d\n", e.text, e.line, e.column);
    return v;
}

/* The fixture tools, normalized. */
static json_t *fixture_tools(void)
{
    json_t *raw = load(TOOLS_JSON), *norm = NULL;
    hx_err  err = {0};
    if (hx_tools_normalize(raw, HX_TOOLS_OPENAI_CHAT, &norm, NULL, 0, &err) != HX_OK)
        fprintf(stderr, "fixture: %s\n", err.msg);
    json_decref(raw);
    return norm;
}

/* ---- grammar and parser helpers ---- */

/* Whether grammar text accepts reply, fed one byte at a time, and ends there. */
static bool grammar_accepts(const hx_grammar *g, const char *reply)
{
    hx_grammar_state *s = hx_grammar_start(g);
    bool              ok = s != NULL;
    for (size_t i = 0; ok && reply[i]; i++)
        ok = hx_grammar_accept_bytes(s, reply + i, 1);
    ok = ok && hx_grammar_done(s);
    hx_grammar_state_free(s);
    return ok;
}

static hx_grammar *compile_for(hx_toolcall_family f, json_t *tools, hx_tool_choice_kind kind,
                               const char *name, bool parallel)
{
    hx_tool_choice choice = {.kind = kind};
    snprintf(choice.name, sizeof choice.name, "%s", name ? name : "");
    char       *text = NULL;
    hx_grammar *g = NULL;
    hx_err      err = {0};
    if (hx_tools_grammar(f, tools, &choice, parallel, &text, &err) != HX_OK ||
        hx_grammar_compile(text, strlen(text), &g, &err) != HX_OK)
        fprintf(stderr, "%s: %s\n", hx_toolcall_family_name(f), err.msg);
    hx_free(text);
    return g;
}

static bool no_event(void *user, const hx_toolcall_event *ev)
{
    int *n_content = user;
    if (ev->kind == HX_TOOLCALL_EV_CONTENT) (*n_content)++;
    return true;
}

/* Parses reply with family f's parser and checks it is exactly the calls names[i] with arguments
 * args[i] (JSON texts), no content. */
static int parser_reads(hx_toolcall_family f, const char *reply, const char *const *names,
                        const char *const *args, int n)
{
    hx_toolcall_params  p = {f, 1};
    hx_toolcall_parser *tp = NULL;
    int                 n_content = 0;
    CHECK_EQ(hx_toolcall_init(&p, &tp, NULL), HX_OK);
    CHECK_EQ(hx_toolcall_feed(tp, reply, strlen(reply), no_event, &n_content), HX_OK);
    CHECK_EQ(hx_toolcall_finish(tp, no_event, &n_content), HX_OK);
    if (n_content != 0 || hx_toolcall_count(tp) != n)
        CHECK_FAIL("%s: %d calls and %d content runs from: %s", hx_toolcall_family_name(f),
                   hx_toolcall_count(tp), n_content, reply);
    for (int i = 0; i < n; i++) {
        const hx_toolcall *c = hx_toolcall_get(tp, i);
        json_t            *want = load(args[i]);
        CHECK_STR(c->name, names[i]);
        if (!json_equal(c->input, want))
            CHECK_FAIL("%s: call %d arguments %s, want %s", hx_toolcall_family_name(f), i,
                       c->arguments, args[i]);
        json_decref(want);
    }
    hx_toolcall_free(tp);
    return 0;
}

/* ---- per-family replies ---- */

#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END   "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN  "<｜tool▁call▁begin｜>"
#define DS_CALL_END    "<｜tool▁call▁end｜>"
#define DS_SEP         "<｜tool▁sep｜>"

/* Hand-written replies for one family: a get_weather call (w), a search call (s), both in one
 * reply (ws), and replies to refuse: another tool's name, no required "days", "days" as a
 * string. */
typedef struct {
    hx_toolcall_family f;
    const char        *w, *s, *ws, *bad_name, *bad_missing, *bad_type;
} family_case;

#define HERMES_W                                                                                   \
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " WEATHER_ARGS "}\n</tool_call>"
#define HERMES_S "<tool_call>\n{\"name\": \"search\", \"arguments\": " SEARCH_ARGS "}\n</tool_call>"
#define XML_W                                                                                      \
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"                 \
    "<parameter=days>\n3\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n"    \
    "</tool_call>"
#define XML_S                                                                                      \
    "<tool_call>\n<function=search>\n<parameter=filter>\n{\"lang\": \"en\", \"year\": 2024}\n"     \
    "</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n</function>\n</tool_call>"
#define LLAMA_W   "{\"name\": \"get_weather\", \"parameters\": " WEATHER_ARGS "}"
#define LLAMA_S   "{\"name\": \"search\", \"parameters\": " SEARCH_ARGS "}"
#define MISTRAL_W "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " WEATHER_ARGS "}]"
#define MISTRAL_S "[TOOL_CALLS]search[ARGS]" SEARCH_ARGS
#define PY_W      "get_weather(city=\"Paris\", days=3, unit=\"celsius\")"
#define PY_S      "search(filter={\"lang\": \"en\", \"year\": 2024}, tags=[\"a\", \"b\"])"
#define DS_W                                                                                       \
    DS_CALL_BEGIN "function" DS_SEP "get_weather\n```json\n" WEATHER_ARGS "\n```" DS_CALL_END
#define DS_S DS_CALL_BEGIN "search" DS_SEP SEARCH_ARGS DS_CALL_END

static const family_case family_cases[] = {
    {HX_TOOLCALL_GENERIC, HERMES_W, HERMES_S, HERMES_W "\n" HERMES_S,
     "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
     "\"3\"}}\n</tool_call>"},
    {HX_TOOLCALL_HERMES, HERMES_W, HERMES_S, HERMES_W HERMES_S,
     "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"filter\": {\"lang\": 1}}}\n"
     "</tool_call>"},
    {HX_TOOLCALL_QWEN3_CODER, XML_W, XML_S, XML_W "\n" XML_S,
     "<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
     "</tool_call>",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>"},
    {HX_TOOLCALL_LLAMA3, LLAMA_W, LLAMA_S, LLAMA_W ";\n" LLAMA_S,
     "{\"name\": \"get_time\", \"parameters\": {}}",
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}",
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3.5}}"},
    {HX_TOOLCALL_MISTRAL, MISTRAL_W, MISTRAL_S,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " WEATHER_ARGS "}, {\"name\": "
     "\"search\", \"arguments\": " SEARCH_ARGS "}]",
     "[TOOL_CALLS]get_time[ARGS]{}",
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": true}"},
    {HX_TOOLCALL_GEMMA, "```tool_code\n" PY_W "\n```", "```tool_code\n" PY_S "\n```",
     "```tool_code\n" PY_W "\n" PY_S "\n```", "```tool_code\nget_time()\n```",
     "```tool_code\nget_weather(city=\"Paris\", unit=\"celsius\")\n```",
     "```tool_code\nsearch(filter={\"lang\": \"en\"}, tags=\"a\")\n```"},
    {HX_TOOLCALL_DEEPSEEK_V3, DS_CALLS_BEGIN DS_W DS_CALLS_END, DS_CALLS_BEGIN DS_S DS_CALLS_END,
     DS_CALLS_BEGIN DS_W "\n" DS_S DS_CALLS_END,
     DS_CALLS_BEGIN DS_CALL_BEGIN "get_time" DS_SEP "{}" DS_CALL_END DS_CALLS_END,
     DS_CALLS_BEGIN DS_CALL_BEGIN "get_weather" DS_SEP
                                  "{\"city\": \"Paris\"}" DS_CALL_END DS_CALLS_END,
     DS_CALLS_BEGIN DS_CALL_BEGIN "get_weather" DS_SEP
                                  "{\"city\": 7, \"days\": 3}" DS_CALL_END DS_CALLS_END},
    {HX_TOOLCALL_PYTHONIC, "[" PY_W "]", "[" PY_S "]", "[" PY_W ", " PY_S "]", "[get_time()]",
     "[get_weather(days=3)]", "[get_weather(city=\"Paris\", days=\"3\")]"},
};

/* ---- normalizing ---- */

static int expect_normalize_error(hx_tools_shape shape, const char *tools, hx_status st,
                                  const char *param, const char *msg)
{
    json_t *v = load(tools), *out = NULL;
    char    p[64] = "";
    hx_err  err = {0};
    CHECK_EQ(hx_tools_normalize(v, shape, &out, p, sizeof p, &err), st);
    CHECK(out == NULL);
    CHECK_STR(p, param);
    CHECK_CONTAINS(err.msg, msg);
    json_decref(v);
    return 0;
}

static int test_normalize_openai_chat(void)
{
    json_t *v = load("[{\"type\": \"function\", \"function\": {\"name\": \"a\", \"description\": "
                     "\"d\", \"parameters\": {\"type\": \"object\"}, \"strict\": true}},"
                     " {\"type\": \"function\", \"function\": {\"name\": \"b-2_x\"}}]");
    json_t *out = NULL;
    CHECK_EQ(hx_tools_normalize(v, HX_TOOLS_OPENAI_CHAT, &out, NULL, 0, NULL), HX_OK);
    json_t *want =
        load("[{\"type\": \"function\", \"function\": {\"name\": \"a\", \"description\":"
             " \"d\", \"parameters\": {\"type\": \"object\"}}}, {\"type\": \"function\","
             " \"function\": {\"name\": \"b-2_x\", \"description\": \"\", \"parameters\":"
             " {\"type\": \"object\", \"properties\": {}}}}]");
    CHECK(json_equal(out, want));
    json_decref(out);
    json_decref(want);
    json_decref(v);
    if (expect_normalize_error(HX_TOOLS_OPENAI_CHAT,
                               "[{\"type\": \"function\", \"function\": {\"name\": \"a\"}},"
                               " {\"type\": \"function\", \"function\": {\"name\": \"b\"}},"
                               " {\"type\": \"function\", \"function\": {\"name\": \"c d\"}}]",
                               HX_E_INVALID, "tools[2].function.name",
                               "tools[2].function.name must be a string of letters, digits, '_' "
                               "or '-' (at most 64), got \"c d\""))
        return 1;
    char long_name[160];
    snprintf(long_name, sizeof long_name,
             "[{\"type\": \"function\", \"function\": {\"name\": \"%065d\"}}]", 0);
    if (expect_normalize_error(HX_TOOLS_OPENAI_CHAT, long_name, HX_E_INVALID,
                               "tools[0].function.name", "at most 64"))
        return 1;
    if (expect_normalize_error(HX_TOOLS_OPENAI_CHAT,
                               "[{\"type\": \"function\", \"function\": {\"name\": \"a\"}},"
                               " {\"type\": \"function\", \"function\": {\"name\": \"a\"}}]",
                               HX_E_INVALID, "tools[1].function.name", "unique"))
        return 1;
    if (expect_normalize_error(HX_TOOLS_OPENAI_CHAT, "[{\"type\": \"custom\", \"name\": \"x\"}]",
                               HX_E_UNSUPPORTED, "tools[0].type", "'custom' is not supported"))
        return 1;
    if (expect_normalize_error(HX_TOOLS_OPENAI_CHAT, "[{\"function\": {\"name\": \"a\"}}]",
                               HX_E_INVALID, "tools[0].type", "must be \"function\""))
        return 1;
    if (expect_normalize_error(HX_TOOLS_OPENAI_CHAT, "[{\"type\": \"function\", \"name\": \"a\"}]",
                               HX_E_INVALID, "tools[0].function", "must be an object"))
        return 1;
    if (expect_normalize_error(HX_TOOLS_OPENAI_CHAT,
                               "[{\"type\": \"function\", \"function\": {\"name\": \"a\", "
                               "\"parameters\": [1]}}]",
                               HX_E_INVALID, "tools[0].function.parameters", "JSON Schema object"))
        return 1;
    if (expect_normalize_error(HX_TOOLS_OPENAI_CHAT,
                               "[{\"type\": \"function\", \"function\": {\"name\": \"a\", "
                               "\"strict\": 1}}]",
                               HX_E_INVALID, "tools[0].function.strict", "boolean"))
        return 1;
    if (expect_normalize_error(HX_TOOLS_OPENAI_CHAT, "{\"name\": \"a\"}", HX_E_INVALID, "tools",
                               "tools must be an array"))
        return 1;
    return 0;
}

static int test_normalize_anthropic(void)
{
    json_t *v = load("[{\"name\": \"get_weather\", \"description\": \"Weather\", \"input_schema\": "
                     "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}, "
                     "\"cache_control\": {\"type\": \"ephemeral\"}},"
                     " {\"type\": \"custom\", \"name\": \"b\", \"input_schema\": {}}]");
    json_t *out = NULL;
    CHECK_EQ(hx_tools_normalize(v, HX_TOOLS_ANTHROPIC, &out, NULL, 0, NULL), HX_OK);
    json_t *want = load("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                        "\"description\": \"Weather\", \"parameters\": {\"type\": \"object\", "
                        "\"properties\": {\"city\": {\"type\": \"string\"}}}}}, {\"type\": "
                        "\"function\", \"function\": {\"name\": \"b\", \"description\": \"\", "
                        "\"parameters\": {}}}]");
    CHECK(json_equal(out, want));
    json_decref(out);
    json_decref(want);
    json_decref(v);
    if (expect_normalize_error(HX_TOOLS_ANTHROPIC,
                               "[{\"type\": \"web_search_20250305\", \"name\": \"web_search\"}]",
                               HX_E_UNSUPPORTED, "tools[0].type", "'web_search_20250305'"))
        return 1;
    if (expect_normalize_error(HX_TOOLS_ANTHROPIC, "[{\"name\": \"a\"}]", HX_E_INVALID,
                               "tools[0].input_schema",
                               "tools[0].input_schema must be a JSON Schema object, got nothing"))
        return 1;
    if (expect_normalize_error(HX_TOOLS_ANTHROPIC, "[{\"name\": 5, \"input_schema\": {}}]",
                               HX_E_INVALID, "tools[0].name", "tools[0].name must be"))
        return 1;
    return 0;
}

static int test_normalize_responses(void)
{
    json_t *v = load("[{\"type\": \"function\", \"name\": \"f\", \"description\": \"x\", "
                     "\"parameters\": {\"type\": \"object\"}, \"strict\": false}]");
    json_t *out = NULL;
    CHECK_EQ(hx_tools_normalize(v, HX_TOOLS_RESPONSES, &out, NULL, 0, NULL), HX_OK);
    json_t *want = load("[{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                        "\"description\": \"x\", \"parameters\": {\"type\": \"object\"}}}]");
    CHECK(json_equal(out, want));
    json_decref(out);
    json_decref(want);
    json_decref(v);
    if (expect_normalize_error(HX_TOOLS_RESPONSES, "[{\"type\": \"web_search\"}]", HX_E_UNSUPPORTED,
                               "tools[0].type", "'web_search'"))
        return 1;
    if (expect_normalize_error(HX_TOOLS_RESPONSES,
                               "[{\"type\": \"function\", \"name\": \"f\", \"description\": 3}]",
                               HX_E_INVALID, "tools[0].description", "must be a string"))
        return 1;
    return 0;
}

/* ---- tool_choice ---- */

static int expect_choice(hx_tools_shape shape, const char *v, hx_tool_choice_kind kind,
                         const char *name, bool disable_parallel)
{
    json_t        *tools = fixture_tools(), *jv = v ? load(v) : NULL;
    hx_tool_choice c;
    hx_err         err = {0};
    if (hx_tools_choice(jv, shape, tools, &c, NULL, 0, &err) != HX_OK)
        CHECK_FAIL("%s: %s", v ? v : "NULL", err.msg);
    CHECK_EQ(c.kind, kind);
    CHECK_STR(c.name, name);
    CHECK_EQ(c.disable_parallel, disable_parallel);
    json_decref(jv);
    json_decref(tools);
    return 0;
}

static int expect_choice_error(hx_tools_shape shape, const char *v, hx_status st, const char *param,
                               const char *msg)
{
    json_t        *tools = fixture_tools(), *jv = load(v);
    hx_tool_choice c = {.kind = HX_TOOL_CHOICE_NONE, .name = "untouched"};
    char           p[64] = "";
    hx_err         err = {0};
    CHECK_EQ(hx_tools_choice(jv, shape, tools, &c, p, sizeof p, &err), st);
    CHECK_STR(c.name, "untouched");
    CHECK_STR(p, param);
    CHECK_CONTAINS(err.msg, msg);
    json_decref(jv);
    json_decref(tools);
    return 0;
}

static int test_choice_parsing(void)
{
    const hx_tools_shape O = HX_TOOLS_OPENAI_CHAT, A = HX_TOOLS_ANTHROPIC, R = HX_TOOLS_RESPONSES;
    if (expect_choice(O, NULL, HX_TOOL_CHOICE_AUTO, "", false) ||
        expect_choice(O, "null", HX_TOOL_CHOICE_AUTO, "", false) ||
        expect_choice(O, "\"auto\"", HX_TOOL_CHOICE_AUTO, "", false) ||
        expect_choice(O, "\"none\"", HX_TOOL_CHOICE_NONE, "", false) ||
        expect_choice(O, "\"required\"", HX_TOOL_CHOICE_REQUIRED, "", false) ||
        expect_choice(O, "{\"type\": \"function\", \"function\": {\"name\": \"search\"}}",
                      HX_TOOL_CHOICE_NAMED, "search", false) ||
        expect_choice(A, "{\"type\": \"auto\"}", HX_TOOL_CHOICE_AUTO, "", false) ||
        expect_choice(A, "{\"type\": \"none\"}", HX_TOOL_CHOICE_NONE, "", false) ||
        expect_choice(A, "{\"type\": \"any\", \"disable_parallel_tool_use\": true}",
                      HX_TOOL_CHOICE_REQUIRED, "", true) ||
        expect_choice(A, "{\"type\": \"tool\", \"name\": \"get_weather\"}", HX_TOOL_CHOICE_NAMED,
                      "get_weather", false) ||
        expect_choice(R, "\"required\"", HX_TOOL_CHOICE_REQUIRED, "", false) ||
        expect_choice(R, "{\"type\": \"function\", \"name\": \"search\"}", HX_TOOL_CHOICE_NAMED,
                      "search", false))
        return 1;
    if (expect_choice_error(O, "{\"type\": \"function\", \"function\": {\"name\": \"nope\"}}",
                            HX_E_INVALID, "tool_choice.function.name", "'nope' is not the name") ||
        expect_choice_error(A, "{\"type\": \"tool\", \"name\": \"nope\"}", HX_E_INVALID,
                            "tool_choice.name", "'nope'") ||
        expect_choice_error(R, "{\"type\": \"function\", \"name\": \"nope\"}", HX_E_INVALID,
                            "tool_choice.name", "'nope'") ||
        expect_choice_error(O, "\"always\"", HX_E_INVALID, "tool_choice", "got \"always\"") ||
        expect_choice_error(A, "\"auto\"", HX_E_INVALID, "tool_choice", "\"type\"") ||
        expect_choice_error(A, "{\"type\": \"any\", \"disable_parallel_tool_use\": 1}",
                            HX_E_INVALID, "tool_choice.disable_parallel_tool_use", "boolean") ||
        expect_choice_error(O, "{\"type\": \"allowed_tools\", \"mode\": \"auto\"}",
                            HX_E_UNSUPPORTED, "tool_choice.type", "'allowed_tools'") ||
        expect_choice_error(O, "{\"type\": \"function\"}", HX_E_INVALID,
                            "tool_choice.function.name", "got nothing"))
        return 1;
    /* Something must be offered to require a call. */
    json_t        *none = json_array(), *req = json_string("required");
    hx_tool_choice c;
    hx_err         err = {0};
    CHECK_EQ(hx_tools_choice(req, O, none, &c, NULL, 0, &err), HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "no tools");
    json_decref(none);
    json_decref(req);
    return 0;
}

/* ---- call grammars ---- */

static const char *const W_NAME[] = {"get_weather"}, *const S_NAME[] = {"search"};
static const char *const WS_NAMES[] = {"get_weather", "search"};
static const char *const W_ARGS[] = {WEATHER_ARGS}, *const S_ARGS[] = {SEARCH_ARGS};
static const char *const WS_ARGS[] = {WEATHER_ARGS, SEARCH_ARGS};

static int check_family(const family_case *fc, json_t *tools)
{
    const hx_toolcall_family f = fc->f;
    const char              *fam = hx_toolcall_family_name(f);
    hx_grammar              *one = compile_for(f, tools, HX_TOOL_CHOICE_REQUIRED, NULL, false);
    hx_grammar              *par = compile_for(f, tools, HX_TOOL_CHOICE_REQUIRED, NULL, true);
    hx_grammar              *named = compile_for(f, tools, HX_TOOL_CHOICE_NAMED, "search", false);
    CHECK(one && par && named);
    const char *valid[] = {fc->w, fc->s};
    for (int i = 0; i < 2; i++) {
        if (!grammar_accepts(one, valid[i])) CHECK_FAIL("%s refuses: %s", fam, valid[i]);
        if (!grammar_accepts(par, valid[i])) CHECK_FAIL("%s parallel refuses: %s", fam, valid[i]);
    }
    if (parser_reads(f, fc->w, W_NAME, W_ARGS, 1) || parser_reads(f, fc->s, S_NAME, S_ARGS, 1) ||
        parser_reads(f, fc->ws, WS_NAMES, WS_ARGS, 2))
        return 1;
    if (!grammar_accepts(par, fc->ws)) CHECK_FAIL("%s parallel refuses: %s", fam, fc->ws);
    char before[4096];
    snprintf(before, sizeof before, "Sure. %s", fc->w);
    const char *invalid[] = {fc->bad_name, fc->bad_missing, fc->bad_type, before, fc->ws};
    for (size_t i = 0; i < HX_COUNTOF(invalid); i++)
        if (grammar_accepts(one, invalid[i])) CHECK_FAIL("%s accepts: %s", fam, invalid[i]);
    for (size_t i = 0; i + 1 < HX_COUNTOF(invalid); i++)
        if (grammar_accepts(par, invalid[i]))
            CHECK_FAIL("%s parallel accepts: %s", fam, invalid[i]);
    if (!grammar_accepts(named, fc->s)) CHECK_FAIL("%s named refuses: %s", fam, fc->s);
    if (grammar_accepts(named, fc->w)) CHECK_FAIL("%s named accepts: %s", fam, fc->w);
    hx_grammar_free(one);
    hx_grammar_free(par);
    hx_grammar_free(named);
    return 0;
}

static int test_grammar_matches_parser_in_every_family(void)
{
    CHECK_EQ(HX_COUNTOF(family_cases), HX_TOOLCALL_COUNT);
    json_t *tools = fixture_tools();
    CHECK(tools != NULL);
    for (size_t i = 0; i < HX_COUNTOF(family_cases); i++) {
        CHECK_EQ(family_cases[i].f, (hx_toolcall_family)i);
        if (check_family(&family_cases[i], tools)) return 1;
    }
    json_decref(tools);
    return 0;
}

/* A string written unquoted (Qwen3-Coder) must read back as that string: text that would read as
 * another JSON value, or that holds the closing marker, is refused. */
static int test_qwen3_coder_unquoted_strings(void)
{
    json_t     *tools = fixture_tools();
    hx_grammar *g =
        compile_for(HX_TOOLCALL_QWEN3_CODER, tools, HX_TOOL_CHOICE_NAMED, "get_weather", false);
    CHECK(g != NULL);
    static const struct {
        const char *city;
        bool        ok;
    } cases[] = {
        {"Paris", true},      {"", true},
        {"2024-05-01", true}, {"10 Downing St", true},
        {"-", true},          {"1.", true},
        {"1e", true},         {"01", true},
        {"truex", true},      {"true story", true},
        {"nul", true},        {"a<b>c</param", true},
        {"\"quoted\"", true}, {"line\ntwo", true},
        {"42", false},        {"-1.5e+3", false},
        {"true", false},      {"null ", false},
        {"0", false},         {"7 ", false},
        {" padded", false},   {"{\"a\": 1}", false},
        {"[1]", false},       {"x</parameter>y", false},
    };
    static char reply[8192], want[8192];
    for (size_t i = 0; i < HX_COUNTOF(cases); i++) {
        snprintf(reply, sizeof reply,
                 "<tool_call>\n<function=get_weather>\n<parameter=city>\n%s\n"
                 "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
                 cases[i].city);
        if (grammar_accepts(g, reply) != cases[i].ok)
            CHECK_FAIL("city \"%s\": expected %s", cases[i].city,
                       cases[i].ok ? "accept" : "refuse");
        if (!cases[i].ok) continue;
        json_t *args = json_pack("{s:s, s:i}", "city", cases[i].city, "days", 3);
        char   *text = json_dumps(args, 0);
        snprintf(want, sizeof want, "%s", text);
        free(text);
        json_decref(args);
        const char *w = want;
        if (parser_reads(HX_TOOLCALL_QWEN3_CODER, reply, W_NAME, &w, 1)) return 1;
    }
    /* A long value: the unquoted-string rules are right-recursive, so depth does not grow. */
    char *big = malloc(20000);
    CHECK(big != NULL);
    int n = snprintf(big, 20000, "<tool_call>\n<function=get_weather>\n<parameter=city>\n");
    for (int i = 0; i < 15000; i++)
        big[n++] = "abc <def>\n"[i % 10];
    snprintf(big + n, 20000 - (size_t)n,
             "\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>");
    CHECK(grammar_accepts(g, big));
    free(big);
    hx_grammar_free(g);
    json_decref(tools);
    return 0;
}

/* Soundness over random text: whatever unquoted value the grammar accepts, the parser reads back
 * as exactly that string. The alphabet is the characters that start JSON values or the closing
 * marker. */
static int test_qwen3_coder_accepted_strings_read_back(void)
{
    static const char alphabet[] = "truefalsn-01.eE+ \n<</parameter>x\"{[";
    json_t           *tools = fixture_tools();
    hx_grammar       *g =
        compile_for(HX_TOOLCALL_QWEN3_CODER, tools, HX_TOOL_CHOICE_NAMED, "get_weather", false);
    CHECK(g != NULL);
    uint32_t    rng = 99;
    int         n_accepted = 0;
    static char city[32], reply[512];
    for (int iter = 0; iter < 3000; iter++) {
        const size_t n = check_rng(&rng) % 14;
        for (size_t i = 0; i < n; i++)
            city[i] = alphabet[check_rng(&rng) % (sizeof alphabet - 1)];
        city[n] = '\0';
        snprintf(reply, sizeof reply,
                 "<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                 "%s\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
                 city);
        if (!grammar_accepts(g, reply)) continue;
        n_accepted++;
        json_t     *args = json_pack("{s:s, s:i}", "city", city, "days", 3);
        char       *want = json_dumps(args, 0);
        const char *w = want;
        const int   r = parser_reads(HX_TOOLCALL_QWEN3_CODER, reply, W_NAME, &w, 1);
        free(want);
        json_decref(args);
        if (r) CHECK_FAIL("accepted but read back differently: city \"%s\"", city);
    }
    CHECK(n_accepted > 1000); /* the check above was not vacuous */
    hx_grammar_free(g);
    json_decref(tools);
    return 0;
}

static int expect_grammar_error(hx_toolcall_family f, const char *tools_json,
                                hx_tool_choice_kind kind, hx_status st, const char *msg)
{
    json_t *raw = load(tools_json), *tools = NULL;
    CHECK_EQ(hx_tools_normalize(raw, HX_TOOLS_OPENAI_CHAT, &tools, NULL, 0, NULL), HX_OK);
    hx_tool_choice c = {.kind = kind};
    char          *text = NULL;
    hx_err         err = {0};
    CHECK_EQ(hx_tools_grammar(f, tools, &c, false, &text, &err), st);
    CHECK(text == NULL);
    CHECK_CONTAINS(err.msg, msg);
    json_decref(raw);
    json_decref(tools);
    return 0;
}

static int test_grammar_refusals(void)
{
    const char *pattern =
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
        "{\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\", "
        "\"pattern\": \"^a\"}}}}}]";
    const char *mixed = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                        "{\"type\": \"object\", \"properties\": {\"q\": {\"type\": [\"string\", "
                        "\"integer\"]}}}}}]";
    const char *top_any = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                          "\"parameters\": {\"anyOf\": [{\"type\": \"object\"}]}}}]";
    const char *numeric_enum = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                               "\"parameters\": {\"properties\": {\"n\": {\"type\": \"string\", "
                               "\"enum\": [\"1\", \"2\"]}}}}}]";
    const char *backref =
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
        "{\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\", "
        "\"pattern\": \"(a)\\\\1\"}}}}}]";
    if (expect_grammar_error(HX_TOOLCALL_HERMES, backref, HX_TOOL_CHOICE_REQUIRED,
                             HX_E_UNSUPPORTED, "tool 'f' parameters: json_schema: 'pattern': "
                             "regex: backreferences") ||
        expect_grammar_error(HX_TOOLCALL_QWEN3_CODER, pattern, HX_TOOL_CHOICE_REQUIRED,
                             HX_E_UNSUPPORTED, "'pattern' cannot be enforced on a string written "
                             "unquoted") ||
        expect_grammar_error(HX_TOOLCALL_QWEN3_CODER, mixed, HX_TOOL_CHOICE_REQUIRED,
                             HX_E_UNSUPPORTED, "parameter 'q' may be a string or another type") ||
        expect_grammar_error(HX_TOOLCALL_QWEN3_CODER, numeric_enum, HX_TOOL_CHOICE_REQUIRED,
                             HX_E_UNSUPPORTED, "\"1\" would not read back as a string") ||
        expect_grammar_error(HX_TOOLCALL_GEMMA, top_any, HX_TOOL_CHOICE_REQUIRED, HX_E_UNSUPPORTED,
                             "top-level 'anyOf'") ||
        expect_grammar_error(HX_TOOLCALL_HERMES, mixed, HX_TOOL_CHOICE_AUTO, HX_E_INVALID,
                             "required or named") ||
        expect_grammar_error(HX_TOOLCALL_HERMES, mixed, HX_TOOL_CHOICE_NONE, HX_E_INVALID,
                             "required or named"))
        return 1;
    /* A pattern is enforced where strings are quoted: its rules are renamed with the tool's. */
    json_t *raw = load(pattern), *tools = NULL;
    CHECK_EQ(hx_tools_normalize(raw, HX_TOOLS_OPENAI_CHAT, &tools, NULL, 0, NULL), HX_OK);
    hx_grammar *pg = compile_for(HX_TOOLCALL_PYTHONIC, tools, HX_TOOL_CHOICE_REQUIRED, NULL, false);
    CHECK(pg != NULL);
    CHECK(grammar_accepts(pg, "[f(q=\"ab\")]") && !grammar_accepts(pg, "[f(q=\"ba\")]"));
    hx_grammar_free(pg);
    json_decref(raw);
    json_decref(tools);
    /* The same mixed type is fine where strings are quoted. */
    raw = load(mixed);
    tools = NULL;
    CHECK_EQ(hx_tools_normalize(raw, HX_TOOLS_OPENAI_CHAT, &tools, NULL, 0, NULL), HX_OK);
    hx_grammar *g = compile_for(HX_TOOLCALL_PYTHONIC, tools, HX_TOOL_CHOICE_REQUIRED, NULL, false);
    CHECK(g != NULL);
    CHECK(grammar_accepts(g, "[f(q=\"x\")]") && grammar_accepts(g, "[f(q=7)]"));
    CHECK(grammar_accepts(g, "[f()]") && !grammar_accepts(g, "[f(q=true)]"));
    hx_grammar_free(g);
    hx_tool_choice c = {.kind = HX_TOOL_CHOICE_NAMED, .name = "other"};
    char          *text = NULL;
    hx_err         err = {0};
    CHECK_EQ(hx_tools_grammar(HX_TOOLCALL_HERMES, tools, &c, false, &text, &err), HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "'other'");
    json_decref(raw);
    json_decref(tools);
    return 0;
}

/* Every allocation failure while writing a grammar is HX_E_NOMEM and leaks nothing. */
static int test_grammar_out_of_memory(void)
{
    json_t              *tools = fixture_tools();
    const hx_tool_choice c = {.kind = HX_TOOL_CHOICE_REQUIRED};
    for (int f = 0; f < HX_TOOLCALL_COUNT; f++) {
        for (int64_t k = 0;; k++) {
            const size_t live = hx_alloc_live_bytes();
            char        *text = NULL;
            hx_err       err = {0};
            hx_alloc_fail_after(k);
            const hx_status st =
                hx_tools_grammar((hx_toolcall_family)f, tools, &c, true, &text, &err);
            hx_alloc_fail_after(-1);
            hx_free(text);
            CHECK_EQ(hx_alloc_live_bytes(), live);
            if (st == HX_OK) break;
            CHECK_EQ(st, HX_E_NOMEM);
            CHECK(k < 100000);
        }
    }
    json_decref(tools);
    return 0;
}

/* ---- system prompt ---- */

static int test_system_prompt_lists_tools_and_format(void)
{
    json_t *tools = fixture_tools();
    char   *text = NULL;
    CHECK_EQ(hx_tools_system_prompt(tools, HX_TOOLCALL_GENERIC, &text, NULL), HX_OK);
    CHECK_CONTAINS(text, "\n{\"name\": \"get_weather\", \"description\": \"Weather for a city\", "
                         "\"parameters\": {\"type\": \"object\"");
    CHECK_CONTAINS(text, "\n{\"name\": \"search\", \"description\": \"\"");
    CHECK_CONTAINS(text, "<tool_call>\n{\"name\": \"TOOL_NAME\", \"arguments\": {ARGUMENTS}}\n"
                         "</tool_call>");
    CHECK_CONTAINS(text, "answer normally");
    hx_free(text);
    for (int f = 0; f < HX_TOOLCALL_COUNT; f++) {
        CHECK_EQ(hx_tools_system_prompt(tools, (hx_toolcall_family)f, &text, NULL), HX_OK);
        CHECK_CONTAINS(text, "TOOL_NAME");
        hx_free(text);
    }
    hx_err  err = {0};
    json_t *bad = load("[{\"name\": \"x\"}]");
    CHECK_EQ(hx_tools_system_prompt(bad, HX_TOOLCALL_GENERIC, &text, &err), HX_E_INVALID);
    json_decref(bad);
    json_decref(tools);
    return 0;
}

/* ---- templates ---- */

static int test_template_detection_from_snippets(void)
{
    CHECK(hx_tools_template_renders_tools("{%- if tools %}{{ tools | tojson }}{% endif %}"));
    CHECK(!hx_tools_template_renders_tools("You can use tools. {{ messages[0].content }}"));
    CHECK(!hx_tools_template_renders_tools("{{ 'tools' }}{# tools #}{{ tools_x }}"));
    CHECK(!hx_tools_template_renders_tools(NULL));
    CHECK(hx_tools_template_has_tool_calls("{% if message['tool_calls'] %}"));
    CHECK(hx_tools_template_has_tool_calls("{% for c in message.tool_calls %}"));
    CHECK(!hx_tools_template_has_tool_calls("tool_calls {{ message.content }}"));
    CHECK(hx_tools_template_has_tool_role("{% if message.role == \"tool\" %}"));
    CHECK(hx_tools_template_has_tool_role("{%- elif message['role'] == 'ipython' -%}"));
    CHECK(!hx_tools_template_has_tool_role("{% if message.role == 'tools' %}role tool"));
    return 0;
}

/* The whole file dir/templates/name, NUL-terminated (caller frees), or NULL. */
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

static int test_template_detection_from_real_templates(void)
{
    const char *dir = check_shared_data();
    if (!dir) return 0;
    static const struct {
        const char *file;
        bool        tools, calls, role;
    } cases[] = {
        {"qwen2.5-instruct-chujiezheng.jinja", true, true, true},
        {"qwen3-0.6b.jinja", true, true, true},
        {"qwen3-coder-30b-a3b-instruct.jinja", true, true, true},
        {"llama-3.1-tool-json-vllm.jinja", true, true, true},
        {"llama-3.2-3b-instruct.jinja", true, true, true},
        {"mistral-small-3.2-24b-instruct-2506.jinja", true, true, true},
        {"llama-3-8b-instruct.jinja", false, false, false},
        {"mistral-instruct-chujiezheng.jinja", false, false, false},
        {"gemma-2-2b-it.jinja", false, false, false},
        {"chatml.jinja", false, false, false},
    };
    int n_found = 0;
    for (size_t i = 0; i < HX_COUNTOF(cases); i++) {
        char *tpl = slurp(dir, cases[i].file);
        if (!tpl) {
            printf("skip: %s is absent\n", cases[i].file);
            continue;
        }
        n_found++;
        if (hx_tools_template_renders_tools(tpl) != cases[i].tools ||
            hx_tools_template_has_tool_calls(tpl) != cases[i].calls ||
            hx_tools_template_has_tool_role(tpl) != cases[i].role)
            CHECK_FAIL("%s: tools %d calls %d role %d, want %d %d %d", cases[i].file,
                       hx_tools_template_renders_tools(tpl), hx_tools_template_has_tool_calls(tpl),
                       hx_tools_template_has_tool_role(tpl), cases[i].tools, cases[i].calls,
                       cases[i].role);
        free(tpl);
    }
    CHECK(n_found > 0);
    return 0;
}

/* ---- folding ---- */

static const char *const CONVERSATION =
    "[{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Weather in Paris, and search?\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": ["
    "  {\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    "   \"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3, \\\"unit\\\": "
    "\\\"celsius\\\"}\"}},"
    "  {\"id\": \"call_2\", \"type\": \"function\", \"function\": {\"name\": \"search\","
    "   \"arguments\": " SEARCH_ARGS "}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"18 C\"},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call_2\", \"content\": [{\"type\": \"text\", "
    "\"text\": \"3 hits\"}]}, {\"role\": \"assistant\", \"content\": \"It is 18 C.\"}]";

static int test_fold_writes_generic_markup(void)
{
    json_t *msgs = load(CONVERSATION), *out = NULL;
    char   *before = json_dumps(msgs, JSON_COMPACT);
    CHECK_EQ(hx_tools_fold_messages(msgs, HX_TOOLCALL_GENERIC, false, false, &out, NULL), HX_OK);
    json_t *want =
        load("[{\"role\": \"system\", \"content\": \"Be brief.\"},"
             " {\"role\": \"user\", \"content\": \"Weather in Paris, and search?\"},"
             " {\"role\": \"assistant\", \"content\": \"<tool_call>\\n{\\\"name\\\": "
             "\\\"get_weather\\\", "
             "\\\"arguments\\\": {\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3, \\\"unit\\\": "
             "\\\"celsius\\\"}}\\n</tool_call>\\n<tool_call>\\n{\\\"name\\\": \\\"search\\\", "
             "\\\"arguments\\\": {\\\"filter\\\": {\\\"lang\\\": \\\"en\\\", \\\"year\\\": 2024}, "
             "\\\"tags\\\": [\\\"a\\\", \\\"b\\\"]}}\\n</tool_call>\"},"
             " {\"role\": \"user\", \"content\": \"<tool_response>\\n18 C\\n</tool_response>\\n"
             "<tool_response>\\n3 hits\\n</tool_response>\"},"
             " {\"role\": \"assistant\", \"content\": \"It is 18 C.\"}]");
    if (!json_equal(out, want)) {
        char *got = json_dumps(out, JSON_INDENT(1));
        fprintf(stderr, "folded:\n%s\n", got);
        free(got);
        CHECK_FAIL("fold differs");
    }
    /* The input is untouched. */
    char *after = json_dumps(msgs, JSON_COMPACT);
    CHECK_STR(after, before);
    free(before);
    free(after);
    json_decref(want);
    json_decref(out);
    /* Content before the calls stays, followed by a newline. */
    json_t *m = json_array_get(msgs, 2);
    json_object_set_new(m, "content", json_string("Checking."));
    CHECK_EQ(hx_tools_fold_messages(msgs, HX_TOOLCALL_GENERIC, false, true, &out, NULL), HX_OK);
    const char *content = json_string_value(json_object_get(json_array_get(out, 2), "content"));
    CHECK(content && strncmp(content, "Checking.\n<tool_call>\n", 22) == 0);
    CHECK(json_object_get(json_array_get(out, 2), "tool_calls") == NULL);
    CHECK(json_equal(json_array_get(out, 3), json_array_get(msgs, 3))); /* tool role kept */
    CHECK(json_array_get(out, 3) != json_array_get(msgs, 3));           /* in a new object */
    json_decref(out);
    json_decref(msgs);
    return 0;
}

/* Folded calls, in every family, are read back by that family's parser and accepted by its
 * parallel grammar. */
static int test_fold_round_trips_in_every_family(void)
{
    json_t *msgs = load(CONVERSATION), *tools = fixture_tools();
    for (int f = 0; f < HX_TOOLCALL_COUNT; f++) {
        json_t *out = NULL;
        hx_err  err = {0};
        if (hx_tools_fold_messages(msgs, (hx_toolcall_family)f, false, false, &out, &err) != HX_OK)
            CHECK_FAIL("%s: %s", hx_toolcall_family_name((hx_toolcall_family)f), err.msg);
        const char *text = json_string_value(json_object_get(json_array_get(out, 2), "content"));
        CHECK(text != NULL);
        if (parser_reads((hx_toolcall_family)f, text, WS_NAMES, WS_ARGS, 2)) return 1;
        hx_grammar *g =
            compile_for((hx_toolcall_family)f, tools, HX_TOOL_CHOICE_REQUIRED, NULL, true);
        if (!g || !grammar_accepts(g, text))
            CHECK_FAIL("%s grammar refuses the folded calls: %s",
                       hx_toolcall_family_name((hx_toolcall_family)f), text);
        hx_grammar_free(g);
        json_decref(out);
    }
    json_decref(tools);
    json_decref(msgs);
    return 0;
}

static int test_arguments_parsed_for_call_templates(void)
{
    json_t *msgs = load(CONVERSATION), *out = NULL;
    json_t *calls = json_object_get(json_array_get(msgs, 2), "tool_calls");
    json_array_append_new(calls, json_pack("{s:s, s:{s:s, s:s}}", "type", "function", "function",
                                           "name", "raw", "arguments", "not json"));
    CHECK_EQ(hx_tools_fold_messages(msgs, HX_TOOLCALL_HERMES, true, true, &out, NULL), HX_OK);
    json_t *oc = json_object_get(json_array_get(out, 2), "tool_calls");
    json_t *a0 = json_object_get(json_object_get(json_array_get(oc, 0), "function"), "arguments");
    json_t *want = load(WEATHER_ARGS);
    CHECK(json_equal(a0, want));
    json_decref(want);
    CHECK(json_is_object(
        json_object_get(json_object_get(json_array_get(oc, 1), "function"), "arguments")));
    CHECK_STR(json_string_value(
                  json_object_get(json_object_get(json_array_get(oc, 2), "function"), "arguments")),
              "not json");
    CHECK_STR(json_string_value(json_object_get(json_array_get(oc, 0), "id")), "call_1");
    CHECK_STR(json_string_value(json_object_get(json_array_get(out, 3), "role")), "tool");
    /* The request's own arguments are still the string. */
    json_t *orig =
        json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments");
    CHECK(json_is_string(orig));
    json_decref(out);
    json_decref(msgs);
    return 0;
}

static int test_fold_errors_name_the_message(void)
{
    json_t *msgs = load("[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": "
                        "\"f\", \"arguments\": \"[1]\"}}]}]");
    json_t *out = NULL;
    hx_err  err = {0};
    CHECK_EQ(hx_tools_fold_messages(msgs, HX_TOOLCALL_GENERIC, false, false, &out, &err),
             HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "messages[0].tool_calls[0].function.arguments must be a JSON object");
    CHECK(out == NULL);
    json_decref(msgs);
    msgs = load("[\"hi\"]");
    err = (hx_err){0};
    CHECK_EQ(hx_tools_fold_messages(msgs, HX_TOOLCALL_GENERIC, false, false, &out, &err),
             HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "messages[0] must be an object");
    json_decref(msgs);
    return 0;
}

static const check_case cases[] = {
    {"normalize_openai_chat", test_normalize_openai_chat},
    {"normalize_anthropic", test_normalize_anthropic},
    {"normalize_responses", test_normalize_responses},
    {"choice_parsing", test_choice_parsing},
    {"grammar_matches_parser_in_every_family", test_grammar_matches_parser_in_every_family},
    {"qwen3_coder_unquoted_strings", test_qwen3_coder_unquoted_strings},
    {"qwen3_coder_accepted_strings_read_back", test_qwen3_coder_accepted_strings_read_back},
    {"grammar_refusals", test_grammar_refusals},
    {"grammar_out_of_memory", test_grammar_out_of_memory},
    {"system_prompt_lists_tools_and_format", test_system_prompt_lists_tools_and_format},
    {"template_detection_from_snippets", test_template_detection_from_snippets},
    {"template_detection_from_real_templates", test_template_detection_from_real_templates},
    {"fold_writes_generic_markup", test_fold_writes_generic_markup},
    {"fold_round_trips_in_every_family", test_fold_round_trips_in_every_family},
    {"arguments_parsed_for_call_templates", test_arguments_parsed_for_call_templates},
    {"fold_errors_name_the_message", test_fold_errors_name_the_message},
};
CHECK_MAIN(cases)
