/* test_serve_adapters.c - the protocol adapters (src/serve/adapter.h) without an engine.
 *
 * Requests are parsed over a fake server holding a tiny byte-level tokenizer (the 256 GPT-2 byte
 * characters plus ChatML's special tokens, built here) and a ChatML template: what a valid
 * request becomes (sampling, stop strings, limits, prompt tokens), that request fields override
 * the server's settings, that every kind of bad request is refused with the right status and a
 * message naming the field, and that error bodies have each API's shape and HTTP status. */
#include <jansson.h>

#include "base/alloc.h"
#include "check.h"
#include "serve/adapter.h"
#include "../tools/tiny_server.h"

/* ---- fixture ---- */

static hx_server srv;

static int fx_open(void)
{
    hx_err err = {0};
    if (!tiny_server_open(&srv, 512, 64, &err)) CHECK_FAIL("tiny server: %s", err.msg);
    return 0;
}

static void fx_close(void) { tiny_server_close(&srv); }

#define OPEN() do { if (fx_open()) return 1; } while (0)

typedef hx_status (*parse_fn)(const hx_server *, const char *, size_t, hx_completion **,
                              hx_reply_opts *, hx_err *);

/* Parses body with fn; returns the status; *c (when wanted) is the completion. */
static hx_status parse(parse_fn fn, const char *body, hx_completion **c, hx_reply_opts *o,
                       hx_err *err)
{
    hx_completion *tmp = NULL;
    hx_status st = fn(&srv, body, strlen(body), &tmp, o, err);
    if (c) *c = tmp;
    else hx_completion_free(tmp);
    return st;
}

/* The decoded prompt of c, in a static buffer. */
static const char *prompt_text(const hx_completion *c)
{
    static char buf[4096];
    hx_tok_text t = {0};
    hx_err err = {0};
    buf[0] = '\0';
    if (hx_tokenizer_decode(srv.tok, c->prompt, (size_t)c->n_prompt, 0, &t, &err) == HX_OK)
        snprintf(buf, sizeof buf, "%s", t.data ? t.data : "");
    hx_tok_text_free(&t);
    return buf;
}

/* Expects body to fail with st, a message containing want and (when given) param. */
static int expect_fail(parse_fn fn, const char *body, hx_status st, const char *want,
                       const char *param)
{
    hx_reply_opts o;
    hx_err err = {0};
    hx_completion *c = (hx_completion *)1;
    const size_t live = hx_alloc_live_bytes();
    CHECK_EQ(fn(&srv, body, strlen(body), &c, &o, &err), st);
    CHECK(c == (hx_completion *)1); /* untouched on failure */
    CHECK_EQ(err.status, st);
    CHECK_CONTAINS(err.msg, want);
    if (param) CHECK_STR(o.param, param);
    CHECK_EQ(hx_alloc_live_bytes(), live); /* nothing leaked */
    return 0;
}

#define EXPECT_FAIL(...) do { if (expect_fail(__VA_ARGS__)) return 1; } while (0)

/* ---- OpenAI chat ---- */

static int test_chat_request_parses_to_sampling_stop_and_max_tokens(void)
{
    OPEN();
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    const char *body =
        "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":10,\"temperature\":0.5,"
        "\"top_p\":0.9,\"top_k\":7,\"min_p\":0.1,\"seed\":3,\"stop\":[\"x\",\"yy\"],"
        "\"presence_penalty\":0.25,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,"
        "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"user\":\"u\","
        "\"metadata\":{\"a\":1},\"logprobs\":true,\"top_logprobs\":3,\"n\":1}";
    CHECK_EQ(parse(hx_openai_parse_chat, body, &c, &o, &err), HX_OK);
    CHECK_EQ(c->gp.max_tokens, 10);
    CHECK_NEAR(c->gp.sampling.temperature, 0.5, 1e-6);
    CHECK_NEAR(c->gp.sampling.top_p, 0.9, 1e-6);
    CHECK_EQ(c->gp.sampling.top_k, 7);
    CHECK_NEAR(c->gp.sampling.min_p, 0.1, 1e-6);
    CHECK_EQ(c->gp.sampling.seed, 3);
    CHECK_NEAR(c->gp.sampling.presence_penalty, 0.25, 1e-6);
    CHECK_NEAR(c->gp.sampling.frequency_penalty, -0.5, 1e-6);
    CHECK_NEAR(c->gp.sampling.repeat_penalty, 1.1, 1e-6);
    CHECK_EQ(c->gp.n_stop, 2);
    CHECK_STR(c->gp.stop[0], "x");
    CHECK_STR(c->gp.stop[1], "yy");
    CHECK(o.stream && o.include_usage && o.logprobs && o.chat_logprobs);
    CHECK_EQ(o.n_top_logprobs, 3);
    CHECK(c->logprobs);
    CHECK_EQ(c->gp.sampling.n_logprobs, 3);
    CHECK_STR(prompt_text(c), "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi"
                              "<|im_end|>\n<|im_start|>assistant\n");
    /* special tokens of the template are single tokens */
    CHECK_EQ(c->prompt[0], 257);
    hx_completion_free(c);
    fx_close();
    return 0;
}

static int test_absent_fields_take_the_server_settings(void)
{
    OPEN();
    srv.sampling.temperature = 0.3f;
    srv.sampling.top_k = 11;
    srv.max_tokens = 77;
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_openai_parse_chat,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":null}",
                   &c, &o, &err), HX_OK);
    CHECK_NEAR(c->gp.sampling.temperature, 0.3, 1e-6);
    CHECK_EQ(c->gp.sampling.top_k, 11);
    CHECK_EQ(c->gp.max_tokens, 77);
    CHECK_EQ(c->gp.sampling.seed, 42); /* the server was given a seed */
    CHECK_EQ(c->gp.n_stop, 0);
    CHECK(!o.stream && !o.include_usage && !o.logprobs && !c->logprobs);
    hx_completion_free(c);
    /* max_completion_tokens wins over max_tokens */
    CHECK_EQ(parse(hx_openai_parse_chat,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":5,"
                   "\"max_completion_tokens\":6}", &c, &o, &err), HX_OK);
    CHECK_EQ(c->gp.max_tokens, 6);
    hx_completion_free(c);
    fx_close();
    return 0;
}

static int test_requests_without_a_seed_get_different_seeds(void)
{
    OPEN();
    srv.opts.sampling.seed_set = false;
    hx_completion *a = NULL, *b = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    CHECK_EQ(parse(hx_openai_parse_chat, body, &a, &o, &err), HX_OK);
    CHECK_EQ(parse(hx_openai_parse_chat, body, &b, &o, &err), HX_OK);
    CHECK(a->gp.sampling.seed != b->gp.sampling.seed);
    hx_completion_free(a);
    hx_completion_free(b);
    fx_close();
    return 0;
}

static int test_content_parts_join_into_one_string(void)
{
    OPEN();
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_openai_parse_chat,
                   "{\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":\"text\","
                   "\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\","
                   "\"content\":null},{\"role\":\"user\",\"content\":\"q\"}]}",
                   &c, &o, &err), HX_OK);
    CHECK_STR(prompt_text(c), "<|im_start|>system\na\nb<|im_end|>\n<|im_start|>assistant\n"
                              "<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
                              "<|im_start|>assistant\n");
    hx_completion_free(c);
    fx_close();
    return 0;
}

static int test_missing_or_empty_messages_are_invalid(void)
{
    OPEN();
    EXPECT_FAIL(hx_openai_parse_chat, "{\"max_tokens\":3}", HX_E_INVALID, "messages is required",
                "messages");
    EXPECT_FAIL(hx_openai_parse_chat, "{\"messages\":[]}", HX_E_INVALID,
                "messages must be a non-empty array", "messages");
    EXPECT_FAIL(hx_openai_parse_chat, "{\"messages\":\"hi\"}", HX_E_INVALID,
                "got \"hi\"", "messages");
    EXPECT_FAIL(hx_openai_parse_chat, "{\"messages\":[1]}", HX_E_INVALID,
                "messages[0] must be an object", "messages");
    fx_close();
    return 0;
}

static int test_unknown_role_is_invalid(void)
{
    OPEN();
    EXPECT_FAIL(hx_openai_parse_chat,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                "{\"role\":\"wizard\",\"content\":\"b\"}]}",
                HX_E_INVALID, "messages[1].role must be one of", "messages");
    EXPECT_FAIL(hx_openai_parse_chat, "{\"messages\":[{\"content\":\"b\"}]}", HX_E_INVALID,
                "got nothing", "messages");
    EXPECT_FAIL(hx_openai_parse_chat, "{\"messages\":[{\"role\":\"user\"}]}", HX_E_INVALID,
                "messages[0].content is required", "messages");
    fx_close();
    return 0;
}

static int test_wrong_types_are_invalid_naming_the_field(void)
{
    OPEN();
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"temperature\":\"hot\"}", HX_E_INVALID,
                "temperature must be a number between 0 and 2, got \"hot\"", "temperature");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"temperature\":2.5}", HX_E_INVALID,
                "got 2.5", "temperature");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"max_tokens\":0}", HX_E_INVALID,
                "max_tokens must be an integer >= 1, got 0", "max_tokens");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"max_tokens\":2.5}", HX_E_INVALID,
                "max_tokens must be an integer", "max_tokens");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"top_p\":0}", HX_E_INVALID,
                "top_p must be a number greater than 0", "top_p");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"top_k\":-1}", HX_E_INVALID, "top_k", "top_k");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"stream\":\"yes\"}", HX_E_INVALID,
                "stream must be true or false", "stream");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"stop\":5}", HX_E_INVALID,
                "stop must be a string or an array of strings, got 5", "stop");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"stop\":[\"a\",\"\"]}", HX_E_INVALID,
                "stop[1] must not be empty", "stop");
    EXPECT_FAIL(hx_openai_parse_chat,
                "{" MSGS ",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
                "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
                HX_E_INVALID, "at most 16", "stop");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"top_logprobs\":21,\"logprobs\":true}",
                HX_E_INVALID, "top_logprobs must be an integer between 0 and 20", "top_logprobs");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"presence_penalty\":3}", HX_E_INVALID,
                "presence_penalty must be a number between -2 and 2", "presence_penalty");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"stream_options\":{\"include_usage\":1}}",
                HX_E_INVALID, "include_usage must be true or false",
                "stream_options.include_usage");
    EXPECT_FAIL(hx_openai_parse_chat, "[1,2]", HX_E_INVALID, "must be a JSON object", "");
    fx_close();
    return 0;
}

static int test_n_above_one_is_refused(void)
{
    OPEN();
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"n\":2}", HX_E_INVALID,
                "n > 1 is not supported yet", "n");
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_openai_parse_chat, "{" MSGS ",\"n\":1}", NULL, &o, &err), HX_OK);
    fx_close();
    return 0;
}

static int test_logit_bias_reaches_the_sampler_and_bad_ones_are_invalid(void)
{
    OPEN();
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_openai_parse_chat, "{" MSGS ",\"logit_bias\":{\"65\":100,\"258\":-100}}",
                   &c, &o, &err), HX_OK);
    CHECK_EQ(c->gp.sampling.n_bias, 2);
    CHECK_EQ(c->gp.sampling.bias_ids[0], 65);
    CHECK_NEAR(c->gp.sampling.bias_values[0], 100, 1e-6);
    CHECK_EQ(c->gp.sampling.bias_ids[1], 258);
    CHECK_NEAR(c->gp.sampling.bias_values[1], -100, 1e-6);
    hx_completion_free(c);
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"logit_bias\":{\"abc\":1}}", HX_E_INVALID,
                "logit_bias keys must be token ids, got \"abc\"", "logit_bias");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"logit_bias\":{\"99999\":1}}", HX_E_INVALID,
                "token 99999, outside the vocabulary (0..258)", "logit_bias");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"logit_bias\":{\"5\":200}}", HX_E_INVALID,
                "between -100 and 100, got 200", "logit_bias");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"logit_bias\":[1]}", HX_E_INVALID,
                "logit_bias must be an object", "logit_bias");
    fx_close();
    return 0;
}

static int test_prompt_over_the_context_is_a_context_error_with_both_numbers(void)
{
    OPEN();
    srv.n_ctx = 21;
    /* 19 template tokens + 2 bytes of content = 21 tokens: no room left. The first parse
     * warms the tokenizer's word cache, so the second can prove nothing leaks. */
    hx_reply_opts o;
    hx_err err = {0};
    parse(hx_openai_parse_chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"ab\"}]}",
          NULL, &o, &err);
    EXPECT_FAIL(hx_openai_parse_chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"ab\"}]}",
                HX_E_CONTEXT, "the prompt has 21 tokens but the context holds 21", "messages");
    err = (hx_err){0};
    CHECK_EQ(parse(hx_openai_parse_chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}",
                   NULL, &o, &err), HX_OK);
    fx_close();
    return 0;
}

static int test_malformed_json_reports_line_and_column(void)
{
    OPEN();
    EXPECT_FAIL(hx_openai_parse_chat, "{\"messages\":\n [1,}", HX_E_INVALID,
                "not valid JSON", "");
    EXPECT_FAIL(hx_openai_parse_chat, "{\"messages\":\n [1,}", HX_E_INVALID, "line 2, column",
                "");
    EXPECT_FAIL(hx_openai_parse_chat, "", HX_E_INVALID, "not valid JSON", "");
    EXPECT_FAIL(hx_openai_parse_chat, "{\"messages\":\"\xff\"}", HX_E_INVALID,
                "the body must be UTF-8", "");
    fx_close();
    return 0;
}

static int test_unsupported_features_are_refused_clearly(void)
{
    OPEN();
    EXPECT_FAIL(hx_openai_parse_chat,
                "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                "\"image_url\":{\"url\":\"x\"}}]}]}",
                HX_E_UNSUPPORTED, "messages[0].content[0] has type \"image_url\"", "messages");
    EXPECT_FAIL(hx_openai_parse_chat,
                "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"blob\"}]}]}",
                HX_E_INVALID, "unknown type \"blob\"", "messages");
    EXPECT_FAIL(hx_openai_parse_chat,
                "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                "{\"name\":\"x\",\"schema\":{\"type\":\"object\",\"patternProperties\":{}}}}}",
                HX_E_UNSUPPORTED, "patternProperties", "response_format");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"response_format\":{\"type\":\"xml\"}}",
                HX_E_INVALID, "\"xml\"", "response_format");
    EXPECT_FAIL(hx_openai_parse_chat,
                "{" MSGS ",\"functions\":[{\"name\":\"f\"}]}", HX_E_UNSUPPORTED, "send tools",
                "functions");
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_openai_parse_chat,
                   "{" MSGS ",\"tools\":[],\"response_format\":{\"type\":\"text\"}}", NULL, &o,
                   &err), HX_OK);
    CHECK(!o.tools);
    fx_close();
    return 0;
}

#define TOOL_F "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":" \
               "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}," \
               "\"required\":[\"city\"]}}}"

/* The tiny template does not show tools: they are described in the system message, and the
 * reply is parsed for calls. tool_choice "required" and structured output attach a grammar. */
static int test_chat_tools_and_formats_set_up_the_reply(void)
{
    OPEN();
    srv.n_ctx = 4096; /* one token per byte: the tools' description is long */
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_openai_parse_chat, "{" MSGS ",\"tools\":[" TOOL_F "]}", &c, &o, &err),
             HX_OK);
    CHECK(o.tools);
    CHECK(strstr(prompt_text(c), "<|im_start|>system\n") != NULL);
    CHECK(strstr(prompt_text(c), "get_weather") != NULL);
    CHECK(c->grammar == NULL); /* auto: the model may answer in words */
    hx_completion_free(c);

    CHECK_EQ(parse(hx_openai_parse_chat,
                   "{" MSGS ",\"tools\":[" TOOL_F "],\"tool_choice\":\"required\"}", &c, &o,
                   &err), HX_OK);
    CHECK(c->grammar != NULL && c->gp.sampling.grammar == c->grammar);
    CHECK(c->gp.sampling.grammar_vocab == srv.gvocab && !c->gp.sampling.grammar_lazy);
    hx_completion_free(c);

    CHECK_EQ(parse(hx_openai_parse_chat,
                   "{" MSGS ",\"tools\":[" TOOL_F "],\"tool_choice\":\"none\"}", &c, &o, &err),
             HX_OK);
    CHECK(!o.tools && c->grammar == NULL);
    CHECK(strstr(prompt_text(c), "get_weather") == NULL);
    hx_completion_free(c);

    CHECK_EQ(parse(hx_openai_parse_chat, "{" MSGS ",\"response_format\":{\"type\":\"json_object\"}}",
                   &c, &o, &err), HX_OK);
    CHECK(c->grammar != NULL && !o.tools);
    hx_completion_free(c);

    EXPECT_FAIL(hx_openai_parse_chat,
                "{" MSGS ",\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":\"function\","
                "\"function\":{\"name\":\"nope\"}}}",
                HX_E_INVALID, "nope", "tool_choice.function.name");
    fx_close();
    return 0;
}

/* Other servers' structured-output fields: one at a time, each attaching a grammar; a malformed
 * grammar is the request's fault and names its field. */
static int test_other_servers_structured_fields(void)
{
    OPEN();
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_openai_parse_chat, "{" MSGS ",\"guided_choice\":[\"a\\\"b\",\"c\"]}", &c, &o,
                   &err), HX_OK);
    CHECK(c->grammar != NULL);
    hx_grammar_state *g = hx_grammar_start(c->grammar);
    CHECK(hx_grammar_accept_bytes(g, "a\"b", 3) && hx_grammar_done(g));
    hx_grammar_state_free(g);
    hx_completion_free(c);
    CHECK_EQ(parse(hx_openai_parse_completions,
                   "{\"prompt\":\"x\",\"grammar\":\"root ::= [0-9]+\"}", &c, &o, &err), HX_OK);
    CHECK(c->grammar != NULL && c->gp.sampling.grammar == c->grammar);
    hx_completion_free(c);
    CHECK_EQ(parse(hx_openai_parse_chat,
                   "{" MSGS ",\"structured_outputs\":{\"json\":\"{\\\"type\\\":\\\"integer\\\"}\"}}",
                   &c, &o, &err), HX_OK);
    CHECK(c->grammar != NULL);
    hx_completion_free(c);
    EXPECT_FAIL(hx_openai_parse_chat,
                "{" MSGS ",\"guided_choice\":[\"a\"],\"response_format\":{\"type\":\"json_object\"}}",
                HX_E_INVALID, "both ask for structured output", "guided_choice");
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"guided_choice\":[]}", HX_E_INVALID,
                "non-empty array of strings", "guided_choice");
    EXPECT_FAIL(hx_openai_parse_completions, "{\"prompt\":\"x\",\"grammar\":\"root ::= (\"}",
                HX_E_INVALID, "grammar:", "grammar");
    CHECK_EQ(parse(hx_openai_parse_chat, "{" MSGS ",\"guided_regex\":\"[0-9]+\"}", &c, &o, &err),
             HX_OK);
    CHECK(c->grammar != NULL);
    hx_completion_free(c);
    EXPECT_FAIL(hx_openai_parse_chat, "{" MSGS ",\"guided_regex\":\"(a)\\\\1\"}",
                HX_E_UNSUPPORTED, "backreferences", "guided_regex");
    fx_close();
    return 0;
}

/* A conversation with calls and results renders through a template that knows neither: the
 * call is written in the model's markup and the result as a user turn. */
static int test_chat_tool_history_is_folded_for_plain_templates(void)
{
    OPEN();
    srv.n_ctx = 4096; /* one token per byte: the tools' description is long */
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_openai_parse_chat,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"weather in Oslo?\"},"
                   "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
                   "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
                   "\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},"
                   "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"7 C, rain\"}],"
                   "\"tools\":[" TOOL_F "]}",
                   &c, &o, &err), HX_OK);
    const char *t = prompt_text(c);
    CHECK(strstr(t, "get_weather") != NULL);
    CHECK(strstr(t, "Oslo") != NULL);
    CHECK(strstr(t, "7 C, rain") != NULL);
    CHECK(strstr(t, "<|im_start|>tool") == NULL);
    hx_completion_free(c);
    fx_close();
    return 0;
}

static int test_no_chat_template_points_to_completions(void)
{
    OPEN();
    hx_template *tpl = srv.tpl;
    srv.tpl = NULL;
    int r = expect_fail(hx_openai_parse_chat, "{" MSGS "}", HX_E_INVALID, "/v1/completions",
                        "messages");
    srv.tpl = tpl;
    fx_close();
    return r;
}

/* ---- OpenAI completions ---- */

static int test_completion_prompt_forms(void)
{
    OPEN();
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_openai_parse_completions, "{\"prompt\":\"Once\",\"max_tokens\":4,"
                   "\"logprobs\":2,\"echo\":false,\"suffix\":null}", &c, &o, &err), HX_OK);
    CHECK_EQ(c->n_prompt, 4);
    CHECK_STR(prompt_text(c), "Once");
    CHECK_EQ(c->gp.max_tokens, 4);
    CHECK(o.logprobs && !o.chat_logprobs && c->logprobs);
    CHECK_EQ(o.n_top_logprobs, 2);
    hx_completion_free(c);
    CHECK_EQ(parse(hx_openai_parse_completions, "{\"prompt\":[\"<|im_start|>x\"]}", &c, &o,
                   &err), HX_OK);
    CHECK_EQ(c->n_prompt, 2); /* the special token is parsed */
    CHECK_EQ(c->prompt[0], 257);
    hx_completion_free(c);
    CHECK_EQ(parse(hx_openai_parse_completions, "{\"prompt\":[72,105]}", &c, &o, &err), HX_OK);
    CHECK_EQ(c->n_prompt, 2);
    CHECK_EQ(c->prompt[1], 105);
    hx_completion_free(c);
    EXPECT_FAIL(hx_openai_parse_completions, "{\"prompt\":[72,9999]}", HX_E_INVALID,
                "prompt[1] is token 9999, outside the vocabulary", "prompt");
    EXPECT_FAIL(hx_openai_parse_completions, "{\"prompt\":[\"a\",\"b\"]}", HX_E_UNSUPPORTED,
                "several prompts", "prompt");
    EXPECT_FAIL(hx_openai_parse_completions, "{\"prompt\":{}}", HX_E_INVALID,
                "prompt must be a string", "prompt");
    EXPECT_FAIL(hx_openai_parse_completions, "{}", HX_E_INVALID, "prompt is required", "prompt");
    EXPECT_FAIL(hx_openai_parse_completions, "{\"prompt\":\"\"}", HX_E_INVALID, "empty",
                "prompt");
    EXPECT_FAIL(hx_openai_parse_completions, "{\"prompt\":\"a\",\"echo\":true}",
                HX_E_UNSUPPORTED, "echo", "echo");
    EXPECT_FAIL(hx_openai_parse_completions, "{\"prompt\":\"a\",\"suffix\":\"z\"}",
                HX_E_UNSUPPORTED, "suffix", "suffix");
    EXPECT_FAIL(hx_openai_parse_completions, "{\"prompt\":\"a\",\"logprobs\":6}", HX_E_INVALID,
                "logprobs must be an integer between 0 and 5", "logprobs");
    fx_close();
    return 0;
}

/* ---- Anthropic ---- */

static int test_anthropic_request_parses(void)
{
    OPEN();
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_anthropic_parse_messages,
                   "{\"model\":\"claude-x\",\"max_tokens\":9,\"system\":[{\"type\":\"text\","
                   "\"text\":\"sys\"}],\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                   "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"b\"}]}],"
                   "\"stop_sequences\":[\"END\"],\"temperature\":1,\"top_k\":5,\"stream\":true,"
                   "\"metadata\":{\"user_id\":\"u\"}}",
                   &c, &o, &err), HX_OK);
    CHECK_EQ(c->gp.max_tokens, 9);
    CHECK_EQ(c->gp.n_stop, 1);
    CHECK_STR(c->gp.stop[0], "END");
    CHECK_NEAR(c->gp.sampling.temperature, 1.0, 1e-6);
    CHECK_EQ(c->gp.sampling.top_k, 5);
    CHECK(o.stream);
    /* consecutive user turns are joined */
    CHECK_STR(prompt_text(c), "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\na\n\nb"
                              "<|im_end|>\n<|im_start|>assistant\n");
    hx_completion_free(c);
    fx_close();
    return 0;
}

static int test_anthropic_final_assistant_turn_starts_the_reply(void)
{
    OPEN();
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    CHECK_EQ(parse(hx_anthropic_parse_messages,
                   "{\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                   "{\"role\":\"assistant\",\"content\":\"The answer is\"}]}",
                   &c, &o, &err), HX_OK);
    CHECK_STR(prompt_text(c), "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
                              "The answer is");
    hx_completion_free(c);
    fx_close();
    return 0;
}

static int test_anthropic_missing_max_tokens_is_an_error(void)
{
    OPEN();
    EXPECT_FAIL(hx_anthropic_parse_messages,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", HX_E_INVALID,
                "max_tokens: field required", "max_tokens");
    EXPECT_FAIL(hx_anthropic_parse_messages,
                "{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}",
                HX_E_INVALID, "max_tokens must be an integer >= 1", "max_tokens");
    fx_close();
    return 0;
}

static int test_anthropic_bad_requests_are_invalid_or_unsupported(void)
{
    OPEN();
#define AMSG "\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]"
    EXPECT_FAIL(hx_anthropic_parse_messages, "{" AMSG ",\"temperature\":1.5}", HX_E_INVALID,
                "temperature must be a number between 0 and 1, got 1.5", "temperature");
    EXPECT_FAIL(hx_anthropic_parse_messages, "{\"max_tokens\":4,\"messages\":[]}", HX_E_INVALID,
                "messages: expected a non-empty array", "messages");
    EXPECT_FAIL(hx_anthropic_parse_messages,
                "{\"max_tokens\":4,\"messages\":[{\"role\":\"system\",\"content\":\"a\"}]}",
                HX_E_INVALID, "messages.0.role: expected \"user\" or \"assistant\"", "messages");
    EXPECT_FAIL(hx_anthropic_parse_messages,
                "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                "\"image\",\"source\":{}}]}]}",
                HX_E_UNSUPPORTED, "messages.0.content[0]: content blocks of type \"image\"",
                "messages");
    EXPECT_FAIL(hx_anthropic_parse_messages, "{" AMSG ",\"stop_sequences\":\"x\"}", HX_E_INVALID,
                "stop_sequences must be an array of strings", "stop_sequences");
    EXPECT_FAIL(hx_anthropic_parse_messages,
                "{" AMSG ",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]}",
                HX_E_UNSUPPORTED, "web_search_20250305", "tools[0].type");
    EXPECT_FAIL(hx_anthropic_parse_messages, "{" AMSG ",\"thinking\":{\"type\":\"maybe\"}}",
                HX_E_INVALID, "thinking.type", "thinking");
    EXPECT_FAIL(hx_anthropic_parse_messages, "{" AMSG ",\"system\":5}", HX_E_INVALID,
                "system: expected a string or an array", "system");
    fx_close();
    return 0;
}

static int test_count_tokens_counts_the_rendered_prompt(void)
{
    OPEN();
    hx_completion *c = NULL;
    hx_reply_opts o;
    hx_err err = {0};
    int32_t n = 0;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";
    CHECK_EQ(hx_anthropic_parse_count_tokens(&srv, body, strlen(body), &n, &o, &err), HX_OK);
    CHECK_EQ(n, 24); /* 19 template tokens + 5 bytes */
    CHECK_EQ(parse(hx_anthropic_parse_messages,
                   "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}",
                   &c, &o, &err), HX_OK);
    CHECK_EQ(c->n_prompt, n);
    hx_completion_free(c);
    fx_close();
    return 0;
}

/* ---- error bodies ---- */

/* resp's body parsed, and the resp freed. */
static json_t *take_body(hx_http_resp *r)
{
    json_t *j = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
    hx_free(r->body);
    r->body = NULL;
    return j;
}

static const char *header(const hx_http_resp *r, const char *name)
{
    for (int i = 0; i < r->n_headers; i++)
        if (strcmp(r->header_names[i], name) == 0) return r->header_values[i];
    return NULL;
}

static int test_error_bodies_have_each_api_shape_and_status(void)
{
    hx_http_resp r = {0};
    hx_serve_error(HX_API_OPENAI, HX_E_INVALID, "temperature must be a number", "temperature", &r);
    CHECK_EQ(r.status, 400);
    json_t *j = take_body(&r);
    CHECK(j);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
              "temperature must be a number");
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
              "invalid_request_error");
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "param")),
              "temperature");
    CHECK(json_is_null(json_object_get(json_object_get(j, "error"), "code")));
    json_decref(j);

    r = (hx_http_resp){0};
    hx_serve_error(HX_API_OPENAI, HX_E_CONTEXT, "the prompt has 9 tokens", "messages", &r);
    CHECK_EQ(r.status, 400);
    j = take_body(&r);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
              "context_length_exceeded");
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
              "memory_admission");
    json_decref(j);
    r = (hx_http_resp){0};
    hx_serve_error(HX_API_ANTHROPIC, HX_E_CONTEXT, "the prompt has 9 tokens", NULL, &r);
    CHECK_EQ(r.status, 400);
    j = take_body(&r);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
              "memory_admission");
    json_decref(j);

    r = (hx_http_resp){0};
    hx_serve_error(HX_API_ANTHROPIC, HX_E_BUSY, "busy", NULL, &r);
    CHECK_EQ(r.status, 503);
    CHECK_STR(header(&r, "Retry-After"), "1");
    j = take_body(&r);
    CHECK_STR(json_string_value(json_object_get(j, "type")), "error");
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
              "overloaded_error");
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "message")), "busy");
    json_decref(j);

    static const struct {
        hx_status st;
        int       status;
        const char *openai, *anthropic;
    } map[] = {
        {HX_E_UNSUPPORTED, 400, "invalid_request_error", "invalid_request_error"},
        {HX_E_NOTFOUND,    404, "not_found_error",       "not_found_error"},
        {HX_E_NOMEM,       500, "server_error",          "api_error"},
        {HX_E_IO,          500, "server_error",          "api_error"},
    };
    for (size_t i = 0; i < HX_COUNTOF(map); i++) {
        r = (hx_http_resp){0};
        hx_serve_error(HX_API_OPENAI, map[i].st, "m", NULL, &r);
        CHECK_EQ(r.status, map[i].status);
        j = take_body(&r);
        CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
                  map[i].openai);
        json_decref(j);
        r = (hx_http_resp){0};
        hx_serve_error(HX_API_ANTHROPIC, map[i].st, "m", NULL, &r);
        CHECK_EQ(r.status, map[i].status);
        j = take_body(&r);
        CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
                  map[i].anthropic);
        json_decref(j);
    }
    return 0;
}

static int test_http_layer_errors_follow_the_path(void)
{
    hx_http_resp r = {0};
    hx_serve_http_error(NULL, "/v1/messages", 401, "invalid API key", &r);
    CHECK_EQ(r.status, 401);
    json_t *j = take_body(&r);
    CHECK_STR(json_string_value(json_object_get(j, "type")), "error");
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
              "authentication_error");
    json_decref(j);

    r = (hx_http_resp){0};
    hx_serve_http_error(NULL, "/v1/messages/count_tokens", 413, "too big", &r);
    j = take_body(&r);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
              "request_too_large");
    json_decref(j);

    r = (hx_http_resp){0};
    hx_serve_http_error(NULL, "/v1/chat/completions", 401, "invalid API key", &r);
    j = take_body(&r);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
              "authentication_error");
    CHECK(json_object_get(json_object_get(j, "error"), "param") != NULL);
    CHECK(json_object_get(json_object_get(j, "error"), "code") != NULL);
    json_decref(j);

    r = (hx_http_resp){0};
    hx_serve_http_error(NULL, "/v1/messagesX", 405, "method not allowed", &r);
    CHECK_EQ(r.status, 405);
    j = take_body(&r);
    CHECK(json_object_get(j, "type") == NULL); /* OpenAI's shape: not an Anthropic path */
    json_decref(j);
    return 0;
}

static int test_errors_after_a_stream_began_are_one_event(void)
{
    hx_http_buf b = {0};
    CHECK(hx_serve_error_event(HX_API_ANTHROPIC, HX_E_NOMEM, "oops", &b));
    CHECK(b.data && strncmp(b.data, "event: error\ndata: {", 20) == 0);
    CHECK(b.len > 2 && memcmp(b.data + b.len - 2, "\n\n", 2) == 0);
    CHECK_CONTAINS(b.data, "\"api_error\"");
    b.len = 0;
    CHECK(hx_serve_error_event(HX_API_OPENAI, HX_E_INVALID, "bad", &b));
    CHECK(strncmp(b.data, "data: {\"error\":{", 16) == 0);
    hx_free(b.data);
    return 0;
}

static const check_case cases[] = {
    { "chat_request_parses_to_sampling_stop_and_max_tokens", test_chat_request_parses_to_sampling_stop_and_max_tokens },
    { "absent_fields_take_the_server_settings", test_absent_fields_take_the_server_settings },
    { "requests_without_a_seed_get_different_seeds", test_requests_without_a_seed_get_different_seeds },
    { "content_parts_join_into_one_string", test_content_parts_join_into_one_string },
    { "missing_or_empty_messages_are_invalid", test_missing_or_empty_messages_are_invalid },
    { "unknown_role_is_invalid", test_unknown_role_is_invalid },
    { "wrong_types_are_invalid_naming_the_field", test_wrong_types_are_invalid_naming_the_field },
    { "n_above_one_is_refused", test_n_above_one_is_refused },
    { "logit_bias_reaches_the_sampler_and_bad_ones_are_invalid", test_logit_bias_reaches_the_sampler_and_bad_ones_are_invalid },
    { "prompt_over_the_context_is_a_context_error_with_both_numbers", test_prompt_over_the_context_is_a_context_error_with_both_numbers },
    { "malformed_json_reports_line_and_column", test_malformed_json_reports_line_and_column },
    { "unsupported_features_are_refused_clearly", test_unsupported_features_are_refused_clearly },
    { "no_chat_template_points_to_completions", test_no_chat_template_points_to_completions },
    { "completion_prompt_forms", test_completion_prompt_forms },
    { "anthropic_request_parses", test_anthropic_request_parses },
    { "anthropic_final_assistant_turn_starts_the_reply", test_anthropic_final_assistant_turn_starts_the_reply },
    { "anthropic_missing_max_tokens_is_an_error", test_anthropic_missing_max_tokens_is_an_error },
    { "anthropic_bad_requests_are_invalid_or_unsupported", test_anthropic_bad_requests_are_invalid_or_unsupported },
    { "count_tokens_counts_the_rendered_prompt", test_count_tokens_counts_the_rendered_prompt },
    { "chat_tools_and_formats_set_up_the_reply", test_chat_tools_and_formats_set_up_the_reply },
    { "other_servers_structured_fields", test_other_servers_structured_fields },
    { "chat_tool_history_is_folded_for_plain_templates",
      test_chat_tool_history_is_folded_for_plain_templates },
    { "error_bodies_have_each_api_shape_and_status", test_error_bodies_have_each_api_shape_and_status },
    { "http_layer_errors_follow_the_path", test_http_layer_errors_follow_the_path },
    { "errors_after_a_stream_began_are_one_event", test_errors_after_a_stream_began_are_one_event },
};
CHECK_MAIN(cases)
