/* test_grammar.c - grammar compiler errors, the recognizer, JSON Schema grammars, token masks
 * against a brute-force check, and mask-driven generation that always yields a valid instance. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime for the timing print */
#include <jansson.h>
#include <time.h>

#include "base/alloc.h"
#include "check.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"

/* ---- helpers ---- */

static hx_grammar *compile(const char *text)
{
    hx_grammar *g = NULL;
    hx_err err = { 0 };
    if (hx_grammar_compile(text, strlen(text), &g, &err) != HX_OK)
        fprintf(stderr, "compile failed: %s\n", err.msg);
    return g;
}

static hx_grammar *compile_schema(const char *schema_json)
{
    json_error_t je;
    json_t *schema = json_loads(schema_json, 0, &je);
    if (!schema) {
        fprintf(stderr, "bad test schema: %s\n", je.text);
        return NULL;
    }
    char *text = NULL;
    hx_err err = { 0 };
    hx_grammar *g = NULL;
    if (hx_json_schema_to_grammar(schema, &text, &err) != HX_OK)
        fprintf(stderr, "schema failed: %s\n", err.msg);
    else g = compile(text);
    hx_free(text);
    json_decref(schema);
    return g;
}

/* Whether s is a complete sentence. */
static bool accepts(const hx_grammar *g, const char *s)
{
    hx_grammar_state *st = hx_grammar_start(g);
    const bool ok = st && hx_grammar_accept_bytes(st, s, strlen(s)) && hx_grammar_done(st);
    hx_grammar_state_free(st);
    return ok;
}

static int check_compile_error(const char *text, hx_status want, const char *where,
                               const char *what)
{
    hx_grammar *g = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_grammar_compile(text, strlen(text), &g, &err), want);
    CHECK(g == NULL);
    CHECK_CONTAINS(err.msg, where);
    CHECK_CONTAINS(err.msg, what);
    return 0;
}

/* ---- grammar text ---- */

static int test_compile_errors_name_line_and_column(void)
{
    CHECK_EQ(check_compile_error("root ::= \"abc", HX_E_INVALID, "grammar:1:14:",
                                 "expected '\"' to close the literal opened at 1:10"), 0);
    CHECK_EQ(check_compile_error("root ::= x\n  y ::= \"a\"\n", HX_E_INVALID, "grammar:1:10:",
                                 "definition of rule 'x'"), 0);
    CHECK_EQ(check_compile_error("root ::= (\"a\" | \"b\"\n", HX_E_INVALID, "grammar:2:1:",
                                 "expected ')' to close the group opened at 1:10, found end"), 0);
    CHECK_EQ(check_compile_error("root = \"a\"", HX_E_INVALID, "grammar:1:6:",
                                 "expected '::=' after rule name 'root', found '='"), 0);
    CHECK_EQ(check_compile_error("a ::= \"x\"", HX_E_INVALID, "grammar:1:1:", "'root'"), 0);
    CHECK_EQ(check_compile_error("root ::= [z-a]", HX_E_INVALID, "grammar:1:11:",
                                 "expected a range low-high"), 0);
    CHECK_EQ(check_compile_error("root ::= \"x\"{3,1}", HX_E_INVALID, "grammar:1:13:",
                                 "m <= n, found {3,1}"), 0);
    CHECK_EQ(check_compile_error("# c\n\nroot ::= \"a\" @", HX_E_INVALID, "grammar:3:14:",
                                 "found '@'"), 0);
    CHECK_EQ(check_compile_error("root ::= \"\\q\"", HX_E_INVALID, "grammar:1:11:",
                                 "expected an escape"), 0);
    CHECK_EQ(check_compile_error("root ::= * \"a\"", HX_E_INVALID, "grammar:1:10:",
                                 "expected a symbol before '*'"), 0);
    CHECK_EQ(check_compile_error("root ::= \"a\"\nroot ::= \"b\"", HX_E_INVALID, "grammar:2:1:",
                                 "second definition of 'root' (first at 1:1)"), 0);
    CHECK_EQ(check_compile_error("root ::= x \"a\"\nx ::= root | \"b\"", HX_E_UNSUPPORTED,
                                 "grammar:", "left-recursive"), 0);
    CHECK_EQ(check_compile_error("root ::= (\"\")*", HX_E_UNSUPPORTED, "grammar:",
                                 "left-recursive"), 0);
    CHECK_EQ(check_compile_error("root ::= \"a\"{5000}", HX_E_UNSUPPORTED, "grammar:1:14:",
                                 "repetition count up to 4096"), 0);
    return 0;
}

static int test_literals_classes_and_repetition_accept_the_right_strings(void)
{
    hx_grammar *g = compile("root ::= \"ab\" [0-9]+ (\"x\" | \"yz\")? [^a-c]{2,3} tail\n"
                            "tail ::= \"!\"* \".\"  # comment\n");
    CHECK(g != NULL);
    CHECK(accepts(g, "ab1dd."));
    CHECK(accepts(g, "ab123xdef!!."));
    CHECK(accepts(g, "ab0yzzz."));
    CHECK(!accepts(g, "ab"));            /* [0-9]+ needs one digit */
    CHECK(!accepts(g, "abxdd."));
    CHECK(!accepts(g, "ab1ad."));        /* a is excluded */
    CHECK(!accepts(g, "ab1dddd."));      /* at most 3 */
    CHECK(!accepts(g, "ab1d."));         /* at least 2 */
    CHECK(!accepts(g, "ab1dd.!"));
    hx_grammar_state *s = hx_grammar_start(g);
    CHECK(hx_grammar_accept_bytes(s, "ab1", 3));
    CHECK(!hx_grammar_done(s) && hx_grammar_can_continue(s));
    CHECK(!hx_grammar_accept_bytes(s, "ab", 2)); /* rejected: state unchanged */
    CHECK(hx_grammar_accept_bytes(s, "2yzqqq", 6)); /* three: "." can only be the tail */
    CHECK(!hx_grammar_done(s));
    CHECK(hx_grammar_accept_bytes(s, ".", 1));
    CHECK(hx_grammar_done(s) && !hx_grammar_can_continue(s));
    hx_grammar_state_free(s);
    hx_grammar_free(g);

    g = compile("root ::= \"a\"{3} \"b\"{2,} \"c\"{0,2} .");
    CHECK(g != NULL);
    CHECK(accepts(g, "aaabbcc\xE2\x82\xAC")); /* . takes one whole character (€) */
    CHECK(accepts(g, "aaabbbbbz"));
    CHECK(!accepts(g, "aabbz"));
    CHECK(!accepts(g, "aaabz"));
    CHECK(!accepts(g, "aaabbcccz"));
    CHECK(!accepts(g, "aaabb\xE2\x82")); /* half a character is not done */
    hx_grammar_free(g);
    return 0;
}

static int test_recursion_accepts_nested_structures(void)
{
    hx_grammar *g = compile("root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\n"
                            "item ::= list | [0-9]+\n");
    CHECK(g != NULL);
    CHECK(accepts(g, "[]"));
    CHECK(accepts(g, "[1,[2,[3,[]]],45]"));
    CHECK(!accepts(g, "[1,[2]"));
    CHECK(!accepts(g, "[1,]"));
    char deep[2100];
    for (int i = 0; i < 200; i++) deep[i] = '[', deep[200 + i] = ']';
    deep[400] = '\0';
    CHECK(accepts(g, deep));
    /* Past the depth limit the byte is refused: no crash, no hang. */
    hx_grammar_state *s = hx_grammar_start(g);
    memset(deep, '[', 2000);
    CHECK(!hx_grammar_accept_bytes(s, deep, 2000));
    CHECK(hx_grammar_accept_bytes(s, "[]", 2) && hx_grammar_done(s)); /* unchanged by refusal */
    hx_grammar_state_free(s);
    hx_grammar_free(g);
    return 0;
}

/* Each "a" doubles the parses (a "b" or a "c" owed per level): past HX_GRAMMAR_MAX_STACKS the
 * byte is refused instead of the set growing without bound. */
static int test_exploding_ambiguity_is_refused_not_hung(void)
{
    hx_grammar *g = compile("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"a\"");
    CHECK(g != NULL);
    hx_grammar_state *s = hx_grammar_start(g);
    int accepted = 0;
    while (accepted < 40 && hx_grammar_accept_bytes(s, "a", 1)) accepted++;
    CHECK(accepted >= 10 && accepted < 40);
    CHECK(hx_grammar_can_continue(s)); /* still usable where it stopped */
    CHECK(hx_grammar_accept_bytes(s, "b", 1));
    hx_grammar_state_free(s);
    hx_grammar_free(g);
    return 0;
}

static int test_classes_take_utf8_characters_byte_by_byte(void)
{
    hx_grammar *g = compile("root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"");
    CHECK(g != NULL);
    CHECK(accepts(g, "\"h\xC3\xA9llo \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80\""));
    CHECK(!accepts(g, "\"a\"b\""));
    CHECK(!accepts(g, "\"\xC3(\""));        /* lead byte without its continuation */
    CHECK(!accepts(g, "\"\xC0\xAF\""));     /* overlong */
    CHECK(!accepts(g, "\"\xED\xA0\x80\"")); /* a surrogate */
    hx_grammar_state *s = hx_grammar_start(g);
    const char emoji[] = "\"\xF0\x9F\x98\x80";
    for (int i = 0; i < 5; i++) CHECK(hx_grammar_accept_bytes(s, emoji + i, 1));
    CHECK(!hx_grammar_accept_bytes(s, "\xED", 1) || hx_grammar_can_continue(s));
    hx_grammar_state_free(s);
    hx_grammar_free(g);

    g = compile("root ::= [a\\u00E9-\\u00FF]+"); /* only ASCII 'a' and U+00E9..U+00FF */
    CHECK(g != NULL);
    CHECK(accepts(g, "a\xC3\xA9\xC3\xBF"));
    CHECK(!accepts(g, "\xC3\xA8"));
    s = hx_grammar_start(g);
    CHECK(!hx_grammar_accept_bytes(s, "\xE6", 1)); /* no 3-byte character is in the class */
    CHECK(hx_grammar_accept_bytes(s, "\xC3", 1));  /* some 2-byte ones are */
    CHECK(!hx_grammar_done(s));
    hx_grammar_state_free(s);
    hx_grammar_free(g);
    return 0;
}

/* ---- JSON Schema ---- */

static int check_schema(const char *schema, const char *const *good, size_t n_good,
                        const char *const *bad, size_t n_bad)
{
    hx_grammar *g = compile_schema(schema);
    CHECK(g != NULL);
    for (size_t i = 0; i < n_good; i++)
        if (!accepts(g, good[i])) CHECK_FAIL("schema %s should accept %s", schema, good[i]);
    for (size_t i = 0; i < n_bad; i++)
        if (accepts(g, bad[i])) CHECK_FAIL("schema %s should reject %s", schema, bad[i]);
    hx_grammar_free(g);
    return 0;
}

typedef struct {
    const char *schema, *msg; /* msg: a part of the error message */
    hx_status   st;
} schema_error;

/* Each schema is refused with its status and message, and no grammar text. */
static int expect_schema_errors(const schema_error *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_t *schema = json_loads(cases[i].schema, 0, NULL);
        CHECK(schema != NULL);
        char *text = NULL;
        hx_err err = { 0 };
        CHECK_EQ(hx_json_schema_to_grammar(schema, &text, &err), cases[i].st);
        CHECK(text == NULL);
        CHECK_CONTAINS(err.msg, cases[i].msg);
        json_decref(schema);
    }
    return 0;
}

#define SCHEMA_CASE(schema, good, bad) \
    CHECK_EQ(check_schema(schema, good, HX_COUNTOF(good), bad, HX_COUNTOF(bad)), 0)

static int test_schema_object_properties_in_order_with_optional_ones(void)
{
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
        "\"age\":{\"type\":\"integer\"},\"ok\":{\"type\":\"boolean\"},"
        "\"score\":{\"type\":[\"number\",\"null\"]}},\"required\":[\"name\",\"ok\"],"
        "\"additionalProperties\":false}";
    static const char *const good[] = {
        "{\"name\":\"a\",\"ok\":true}",
        "{\"name\": \"b\\\"q\\u00e9\", \"age\": -12, \"ok\": false, \"score\": 1.5e3}",
        "{\n  \"name\": \"x\",\n  \"ok\": true,\n  \"score\": null\n}",
        "{\"name\":\"\",\"age\":0,\"ok\":true}",
    };
    static const char *const bad[] = {
        "{\"ok\":true}",                             /* name is required */
        "{\"ok\":true,\"name\":\"a\"}",              /* declared order */
        "{\"name\":\"a\",\"ok\":true,\"x\":1}",      /* no extra keys */
        "{\"name\":\"a\",\"age\":1.5,\"ok\":true}",  /* integer */
        "{\"name\":\"a\",\"age\":01,\"ok\":true}",   /* leading zero */
        "{\"name\":\"a\",\"ok\":true,}",
        "{\"name\":\"a\",      \"ok\":true}",        /* whitespace is kept tight */
        "{\"name\":\"\\ud800\",\"ok\":true}",        /* lone surrogate escape */
    };
    SCHEMA_CASE(schema, good, bad);
    return 0;
}

static int test_schema_nested_arrays_enum_anyof_and_refs(void)
{
    static const char arrays[] =
        "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"id\":"
        "{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",2,"
        "null]},\"maxItems\":2}},\"required\":[\"id\"]},\"minItems\":1,\"maxItems\":3}";
    static const char *const a_good[] = {
        "[{\"id\":1}]",
        "[{\"id\":1,\"tags\":[]},{\"id\":2,\"tags\":[\"a\",2]},{\"id\":3,\"tags\":[null]}]",
    };
    static const char *const a_bad[] = {
        "[]", "[{\"id\":1},{\"id\":2},{\"id\":3},{\"id\":4}]", "[{\"id\":1,\"tags\":[\"c\"]}]",
        "[{\"id\":1,\"tags\":[\"a\",\"b\",2]}]", "[{\"tags\":[]}]",
    };
    SCHEMA_CASE(arrays, a_good, a_bad);

    static const char refs[] =
        "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
        "\"v\":{\"anyOf\":[{\"type\":\"string\",\"maxLength\":3},{\"const\":{\"k\":[1,true]}}]},"
        "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
        "\"required\":[\"v\"]}}}";
    static const char *const r_good[] = {
        "{\"v\":\"abc\"}",
        "{\"v\":{\"k\":[1,true]},\"kids\":[{\"v\":\"\"},{\"v\":\"x\",\"kids\":[{\"v\":\"y\"}]}]}",
    };
    static const char *const r_bad[] = {
        "{\"v\":\"abcd\"}", "{\"v\":{\"k\":[1]}}", "{\"v\":\"a\",\"kids\":[{}]}",
    };
    SCHEMA_CASE(refs, r_good, r_bad);

    static const char defs[] =
        "{\"definitions\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},\"u\":{\"format\":"
        "\"uuid\"}},\"oneOf\":[{\"$ref\":\"#/definitions/d\"},{\"$ref\":\"#/definitions/u\"},"
        "{\"type\":\"string\",\"format\":\"date-time\"},{\"type\":\"string\",\"format\":"
        "\"email\",\"title\":\"e\"}]}";
    static const char *const d_good[] = {
        "\"2024-02-29\"", "\"123e4567-e89b-12d3-a456-426614174000\"",
        "\"2024-01-02T03:04:05.123Z\"", "\"2024-01-02T23:59:00+05:30\"", "\"a.b@c.org\"",
    };
    static const char *const d_bad[] = {
        "\"2024-13-01\"", "\"2024-1-01\"", "\"123e4567-e89b-12d3-a456\"", "\"ab.org\"", "12",
    };
    SCHEMA_CASE(defs, d_good, d_bad);

    static const char any_obj[] = "{\"type\":\"object\"}";
    static const char *const o_good[] = { "{}", "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}" };
    static const char *const o_bad[] = { "[]", "{\"a\"}", "{\"a\":1,}" };
    SCHEMA_CASE(any_obj, o_good, o_bad);

    static const char extra[] =
        "{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":"
        "{\"type\":\"boolean\"}}";
    static const char *const e_good[] = { "{}", "{\"a\":1,\"x\":true}", "{\"x\":false,\"y\":true}",
                                          "{\"ab\":true,\"\":false,\"b\\u0061\":true}" };
    /* An extra key is never a declared name, so "a" cannot come back as one. */
    static const char *const e_bad[] = { "{\"x\":1}", "{\"a\":true}", "{\"a\":1,\"a\":true}",
                                         "{\"x\":true,\"a\":1}" };
    SCHEMA_CASE(extra, e_good, e_bad);

    static const char strings[] = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    static const char *const s_good[] = { "\"ab\"", "\"\xC3\xA9\\n\xE6\x97\xA5\"" };
    static const char *const s_bad[] = { "\"a\"", "\"abcd\"", "\"a\nb\"" };
    SCHEMA_CASE(strings, s_good, s_bad);
    return 0;
}

/* pattern: a regex over the string's content, searched unless anchored, escapes as JSON. */
static int test_schema_pattern_constrains_string_content(void)
{
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":"
        "\"^[A-Z]{3}-\\\\d{2}$\"},\"note\":{\"pattern\":\"ok|\\\"\"},\"n\":{\"type\":"
        "[\"string\",\"null\"],\"pattern\":\"^a\\\\n?$\"}},\"required\":[\"code\",\"note\"]}";
    static const char *const good[] = {
        "{\"code\":\"ABC-12\",\"note\":\"ok\"}",
        "{\"code\":\"XYZ-00\",\"note\":\"it is ok, really\",\"n\":null}",
        "{\"code\":\"XYZ-00\",\"note\":\"say \\\"hi\\\"\",\"n\":\"a\\n\"}",
    };
    static const char *const bad[] = {
        "{\"code\":\"AB-12\",\"note\":\"ok\"}",      /* three letters */
        "{\"code\":\"ABC-123\",\"note\":\"ok\"}",    /* anchored at the end */
        "{\"code\":\" ABC-12\",\"note\":\"ok\"}",    /* anchored at the start */
        "{\"code\":\"ABC-12\",\"note\":\"o k\"}",    /* searched, but not found */
        "{\"code\":\"ABC-12\",\"note\":\"ok\",\"n\":\"ab\"}",
        "{\"code\":\"ABC-12\",\"note\":\"ok\",\"n\":\"a\n\"}", /* raw newline */
    };
    SCHEMA_CASE(schema, good, bad);
    static const schema_error errs[] = {
        { "{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}",
          "json_schema: 'pattern': regex: backreferences (\\1) are not supported (at offset 3) "
          "(at #)", HX_E_UNSUPPORTED },
        { "{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}",
          "'pattern' together with 'maxLength' is not supported", HX_E_UNSUPPORTED },
        { "{\"type\":\"string\",\"pattern\":7}", "expected 'pattern' to be a string",
          HX_E_INVALID },
    };
    return expect_schema_errors(errs, HX_COUNTOF(errs));
}

static int test_json_object_mode_accepts_any_object(void)
{
    const char *text = hx_json_object_grammar();
    hx_grammar *g = compile(text);
    CHECK(g != NULL);
    CHECK(accepts(g, "{\"a\": {\"b\": [1, -2.5e-3, \"x\", null, true, {}]}}"));
    CHECK(!accepts(g, "[1]"));
    CHECK(!accepts(g, "{'a': 1}"));
    hx_grammar_free(g);
    return 0;
}

static int test_unsupported_keywords_are_refused_by_name(void)
{
    static const schema_error cases[] = {
        { "{\"type\":\"object\",\"patternProperties\":{}}",
          "json_schema: 'patternProperties' is not supported", HX_E_UNSUPPORTED },
        { "{\"properties\":{\"a\":{\"type\":\"integer\",\"multipleOf\":3}}}",
          "'multipleOf' is not supported (at #/properties/a)", HX_E_UNSUPPORTED },
        { "{\"type\":\"string\",\"format\":\"ipv6\"}", "'format' 'ipv6' is not supported",
          HX_E_UNSUPPORTED },
        { "{\"$ref\":\"http://x/y\"}", "'$ref' 'http://x/y' is not supported", HX_E_UNSUPPORTED },
        { "{\"$ref\":\"#/$defs/missing\"}", "found nothing there", HX_E_INVALID },
        { "{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "minItems <= maxItems",
          HX_E_INVALID },
        { "{\"type\":\"strin\"}", "found 'type' 'strin'", HX_E_INVALID },
    };
    return expect_schema_errors(cases, HX_COUNTOF(cases));
}

/* ---- integer ranges ---- */

/* Compiles schema and checks that, of every integer in [-1100, 1100], it accepts exactly those
 * in [lo, hi]; and never a leading zero or "-0". */
static int check_int_range(const char *schema, int64_t lo, int64_t hi)
{
    hx_grammar *g = compile_schema(schema);
    CHECK(g != NULL);
    char num[32];
    for (int64_t i = -1100; i <= 1100; i++) {
        snprintf(num, sizeof num, "%lld", (long long)i);
        const bool want = i >= lo && i <= hi;
        if (accepts(g, num) != want)
            CHECK_FAIL("schema %s: %s should be %s", schema, num, want ? "accepted" : "rejected");
        /* The same value with a leading zero, which JSON forbids. */
        snprintf(num, sizeof num, "%s0%lld", i < 0 ? "-" : "", (long long)(i < 0 ? -i : i));
        if (accepts(g, num)) CHECK_FAIL("schema %s: %s should be rejected", schema, num);
    }
    static const char *const never[] = { "-0", "00", "007", "-007", "+1", "1.0", "1e2", "" };
    for (size_t i = 0; i < HX_COUNTOF(never); i++)
        if (accepts(g, never[i])) CHECK_FAIL("schema %s: '%s' should be rejected", schema,
                                             never[i]);
    hx_grammar_free(g);
    return 0;
}

#define INT_RANGE_CASE(schema, lo, hi) CHECK_EQ(check_int_range(schema, lo, hi), 0)

static int test_schema_integer_bounds_accept_exactly_the_range(void)
{
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":0,\"maximum\":0}", 0, 0);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5}", -5, 5);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":-120,\"maximum\":-7}", -120, -7);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":123,\"maximum\":456}", 123, 456);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":7,\"maximum\":7}", 7, 7);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":-1000,\"maximum\":1099}", -1000, 1099);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":10,\"maximum\":999}", 10, 999);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":-909,\"maximum\":190}", -909, 190);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":1}", 1, INT64_MAX);
    INT_RANGE_CASE("{\"type\":\"integer\",\"maximum\":-3}", INT64_MIN, -3);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":-1}", -1, INT64_MAX);
    INT_RANGE_CASE("{\"type\":\"integer\",\"maximum\":0}", INT64_MIN, 0);

    /* The grammar text for [123, 456] is the documented prefix-then-classes decomposition. */
    json_t *schema = json_loads("{\"type\":\"integer\",\"minimum\":123,\"maximum\":456}", 0, NULL);
    CHECK(schema != NULL);
    char *text = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_json_schema_to_grammar(schema, &text, &err), HX_OK);
    CHECK_CONTAINS(text, "::= \"12\" [3-9] | \"1\" [3-9] [0-9] | [2-3] [0-9]{2} | "
                         "\"4\" [0-4] [0-9] | \"45\" [0-6]\n");
    hx_free(text);
    json_decref(schema);
    return 0;
}

/* One-sided bounds keep the 16-digit cap of the plain integer rule; bounds past it clamp. */
static int test_schema_integer_bounds_keep_the_sixteen_digit_cap(void)
{
    static const char pos[] = "{\"type\":\"integer\",\"minimum\":1}";
    static const char *const p_good[] = { "1", "9", "10", "1234567890", "9999999999999999" };
    static const char *const p_bad[] = { "0", "-1", "10000000000000000", "01", "-0" };
    SCHEMA_CASE(pos, p_good, p_bad);

    static const char neg[] = "{\"type\":\"integer\",\"maximum\":-3}";
    static const char *const n_good[] = { "-3", "-10", "-99", "-9999999999999999" };
    static const char *const n_bad[] = { "-2", "0", "3", "-10000000000000000", "-03" };
    SCHEMA_CASE(neg, n_good, n_bad);

    static const char wide[] = "{\"type\":\"integer\",\"minimum\":-1e30,\"maximum\":"
                               "1000000000000000000}"; /* a real and a 19-digit integer */
    static const char *const w_good[] = { "0", "-1", "9999999999999999", "-9999999999999999" };
    static const char *const w_bad[] = { "-0", "10000000000000000", "-10000000000000000" };
    SCHEMA_CASE(wide, w_good, w_bad);

    static const char big[] = "{\"type\":\"integer\",\"minimum\":1234567890123,"
                              "\"maximum\":9876543210987654}";
    static const char *const b_good[] = { "1234567890123", "1234567890124", "99999999999999",
                                          "9876543210987654", "9876543210987653",
                                          "2000000000000000" };
    static const char *const b_bad[] = { "1234567890122", "999999999999", "9876543210987655",
                                         "9876543210987660", "98765432109876540" };
    SCHEMA_CASE(big, b_good, b_bad);
    return 0;
}

/* Draft-6 numeric exclusive bounds, draft-4 boolean ones, and real-valued bounds. */
static int test_schema_integer_bounds_exclusive_and_real_valued(void)
{
    INT_RANGE_CASE("{\"type\":\"integer\",\"exclusiveMinimum\":-5,\"exclusiveMaximum\":5}", -4,
                   4);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMinimum\":true,"
                   "\"maximum\":5,\"exclusiveMaximum\":true}", -4, 4);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMinimum\":false,"
                   "\"maximum\":5,\"exclusiveMaximum\":false}", -5, 5);
    /* Both forms of a lower bound: the tighter one wins. */
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":3,\"exclusiveMinimum\":10,"
                   "\"maximum\":100,\"exclusiveMaximum\":200}", 11, 100);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":99.5}", 2, 99);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":-7.5,\"maximum\":-0.5}", -7, -1);
    INT_RANGE_CASE("{\"type\":\"integer\",\"exclusiveMinimum\":1.5,\"exclusiveMaximum\":4.0}",
                   2, 3);
    INT_RANGE_CASE("{\"type\":\"integer\",\"exclusiveMinimum\":-2.0,\"exclusiveMaximum\":-0.1}",
                   -1, -1);
    INT_RANGE_CASE("{\"type\":\"integer\",\"minimum\":2.0,\"exclusiveMaximum\":1000.25}", 2,
                   1000);

    /* Bounds apply to the integer alternative of a type list. */
    static const char nullable[] = "{\"type\":[\"integer\",\"null\"],\"minimum\":1,"
                                   "\"maximum\":12}";
    static const char *const good[] = { "1", "12", "7", "null" };
    static const char *const bad[] = { "0", "13", "-1", "01", "\"1\"" };
    SCHEMA_CASE(nullable, good, bad);
    static const char in_object[] =
        "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0,"
        "\"maximum\":150}},\"required\":[\"age\"]}";
    static const char *const o_good[] = { "{\"age\":0}", "{\"age\": 150}", "{\"age\":42}" };
    static const char *const o_bad[] = { "{\"age\":-1}", "{\"age\":151}", "{\"age\":042}" };
    SCHEMA_CASE(in_object, o_good, o_bad);
    return 0;
}

static int test_schema_integer_bound_errors_name_the_problem(void)
{
    static const schema_error cases[] = {
        { "{\"type\":\"integer\",\"minimum\":5,\"maximum\":3}",
          "found the empty range [5, 3] (at #)", HX_E_INVALID },
        { "{\"type\":\"integer\",\"exclusiveMinimum\":3,\"exclusiveMaximum\":4}",
          "found the empty range [4, 3]", HX_E_INVALID },
        { "{\"type\":\"integer\",\"minimum\":1.2,\"maximum\":1.8}", "found the empty range [2, 1]",
          HX_E_INVALID },
        { "{\"type\":\"integer\",\"minimum\":\"3\"}", "expected 'minimum' to be a number",
          HX_E_INVALID },
        { "{\"type\":\"integer\",\"maximum\":null}", "expected 'maximum' to be a number",
          HX_E_INVALID },
        { "{\"type\":\"integer\",\"exclusiveMaximum\":\"x\"}",
          "expected 'exclusiveMaximum' to be a number or a boolean", HX_E_INVALID },
        { "{\"type\":\"integer\",\"exclusiveMinimum\":true}",
          "expected 'minimum' beside a boolean 'exclusiveMinimum'", HX_E_INVALID },
        { "{\"properties\":{\"x\":{\"type\":\"number\",\"minimum\":0}}}",
          "json_schema: 'minimum' is supported on integers only (at #/properties/x)",
          HX_E_UNSUPPORTED },
        { "{\"type\":[\"integer\",\"number\"],\"maximum\":3}",
          "'maximum' is supported on integers only", HX_E_UNSUPPORTED },
        { "{\"exclusiveMaximum\":3}", "'exclusiveMaximum' is supported on integers only",
          HX_E_UNSUPPORTED },
        { "{\"type\":\"string\",\"exclusiveMinimum\":3}",
          "'exclusiveMinimum' is supported on integers only", HX_E_UNSUPPORTED },
        { "{\"type\":\"integer\",\"enum\":[1,2],\"minimum\":2}",
          "'minimum' is supported on integers only, not beside 'enum'", HX_E_UNSUPPORTED },
    };
    return expect_schema_errors(cases, HX_COUNTOF(cases));
}

/* ---- token masks ---- */

/* 256 byte tokens, then multi-byte ones, then an end token with no bytes. */
static const char *const k_multi[] = {
    "{\"", "\":", "\": ", "true", "false", "null", "\", \"", "\"}", "}", ", \"", "name",
    "age", " ", "\n  ", "\xC3\xA9", "\xE6\x97\xA5", "\"a", "12", "3.5", "[", "],", "{\"name\": \"",
    "\"tags\": [\"", "\"]", "x\"", "\"\xF0\x9F", "\x98\x80", ",", "\"", "-", "e+",
};

typedef struct {
    const char *bytes[400];
    size_t      lens[400];
    char        singles[256];
    int32_t     n, end_id;
} tiny_vocab;

static void tiny_vocab_fill(tiny_vocab *tv)
{
    for (int b = 0; b < 256; b++) {
        tv->singles[b] = (char)b;
        tv->bytes[b] = &tv->singles[b];
        tv->lens[b] = 1;
    }
    tv->n = 256;
    for (size_t i = 0; i < HX_COUNTOF(k_multi); i++) {
        tv->bytes[tv->n] = k_multi[i];
        tv->lens[tv->n++] = strlen(k_multi[i]);
    }
    tv->bytes[tv->n] = "";
    tv->lens[tv->n] = 0;
    tv->end_id = tv->n++;
}

static int check_mask_brute_force(hx_grammar_state *s, const hx_grammar_vocab *v,
                                  const tiny_vocab *tv)
{
    uint8_t allowed[400];
    CHECK_EQ(hx_grammar_mask(s, v, allowed), HX_OK);
    for (int32_t id = 0; id < tv->n; id++) {
        bool want;
        if (id == tv->end_id) {
            want = hx_grammar_done(s);
        } else {
            hx_grammar_state *c = hx_grammar_state_copy(s);
            CHECK(c != NULL);
            want = hx_grammar_accept_bytes(c, tv->bytes[id], tv->lens[id]);
            hx_grammar_state_free(c);
        }
        if (allowed[id] != want)
            CHECK_FAIL("token %d: mask %d, brute force %d", id, allowed[id], want);
    }
    return 0;
}

static const char k_gen_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\"},"
    "\"ok\":{\"type\":\"boolean\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"minItems\":1,"
    "\"maxItems\":3},"
    "\"kind\":{\"anyOf\":[{\"type\":\"null\"},{\"const\":\"x\"}]},"
    "\"pos\":{\"$ref\":\"#/$defs/point\"},"
    "\"note\":{\"type\":\"string\",\"maxLength\":5}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"pos\"],\"additionalProperties\":false,"
    "\"$defs\":{\"point\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},"
    "\"y\":{\"type\":\"number\"}},\"required\":[\"x\",\"y\"]}}}";

static int test_mask_allows_exactly_the_tokens_that_keep_the_state_alive(void)
{
    tiny_vocab tv;
    tiny_vocab_fill(&tv);
    hx_grammar_vocab *v = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_grammar_vocab_init(tv.bytes, tv.lens, tv.n, &tv.end_id, 1, &v, &err), HX_OK);
    CHECK_EQ(hx_grammar_vocab_n_vocab(v), tv.n);
    hx_grammar *g = compile_schema(k_gen_schema);
    CHECK(g != NULL);
    static const char *const prefixes[] = {
        "", "{", "{\"", "{\"name\": \"", "{\"name\": \"\xC3", "{\"name\": \"\xF0\x9F\x98",
        "{\"name\":\"ab\",\"age\":1", "{\"name\":\"ab\",\"age\":-",
        "{\"name\":\"ab\",\"age\":1,\"tags\":[\"a\"",
        "{\"name\":\"\",\"age\":0,\"tags\":[\"a\"],\"pos\":{\"x\":1,\"y\":2e5}",
        "{\"name\":\"\",\"age\":0,\"tags\":[\"a\"],\"pos\":{\"x\":1,\"y\":2}}",
    };
    for (size_t i = 0; i < HX_COUNTOF(prefixes); i++) {
        hx_grammar_state *s = hx_grammar_start(g);
        CHECK(s != NULL);
        if (!hx_grammar_accept_bytes(s, prefixes[i], strlen(prefixes[i])))
            CHECK_FAIL("prefix %s rejected", prefixes[i]);
        CHECK_EQ(check_mask_brute_force(s, v, &tv), 0);
        hx_grammar_state_free(s);
    }
    hx_grammar_free(g);
    hx_grammar_vocab_free(v);
    return 0;
}

/* The sampler calls the mask every step; after the first call it must not allocate. */
static int test_mask_after_the_first_allocates_nothing(void)
{
    tiny_vocab tv;
    tiny_vocab_fill(&tv);
    hx_grammar_vocab *v = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_grammar_vocab_init(tv.bytes, tv.lens, tv.n, &tv.end_id, 1, &v, &err), HX_OK);
    hx_grammar *g = compile_schema(k_gen_schema);
    CHECK(g != NULL);
    hx_grammar_state *s = hx_grammar_start(g);
    CHECK(s && hx_grammar_accept_bytes(s, "{\"name\": \"ab", 12));
    uint8_t first[400], again[400];
    CHECK_EQ(hx_grammar_mask(s, v, first), HX_OK);
    hx_alloc_fail_after(0);
    const hx_status st = hx_grammar_mask(s, v, again);
    hx_alloc_fail_after(-1);
    CHECK_EQ(st, HX_OK);
    CHECK(memcmp(first, again, (size_t)tv.n) == 0);
    hx_grammar_state_free(s);
    hx_grammar_free(g);
    hx_grammar_vocab_free(v);
    return 0;
}

static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Checks an instance of k_gen_schema with jansson. */
static int check_gen_instance(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_ALLOW_NUL, &je);
    if (!j) CHECK_FAIL("generated text does not parse (%s): %s", je.text, text);
    CHECK(json_is_object(j));
    const char *key;
    json_t *val;
    json_object_foreach(j, key, val) {
        const bool known = !strcmp(key, "name") || !strcmp(key, "age") || !strcmp(key, "ok") ||
                           !strcmp(key, "tags") || !strcmp(key, "kind") || !strcmp(key, "pos") ||
                           !strcmp(key, "note");
        if (!known) CHECK_FAIL("unexpected key %s in %s", key, text);
    }
    json_t *name = json_object_get(j, "name"), *age = json_object_get(j, "age");
    json_t *tags = json_object_get(j, "tags"), *pos = json_object_get(j, "pos");
    CHECK(json_is_string(name) && utf8_chars(json_string_value(name)) <= 8);
    CHECK(json_is_integer(age));
    CHECK(json_is_array(tags) && json_array_size(tags) >= 1 && json_array_size(tags) <= 3);
    for (size_t i = 0; i < json_array_size(tags); i++) {
        const char *t = json_string_value(json_array_get(tags, i));
        CHECK(t && strlen(t) == 1 && t[0] >= 'a' && t[0] <= 'c');
    }
    CHECK(json_is_object(pos) && json_is_number(json_object_get(pos, "x")) &&
          json_is_number(json_object_get(pos, "y")));
    json_t *ok = json_object_get(j, "ok"), *kind = json_object_get(j, "kind");
    json_t *note = json_object_get(j, "note");
    CHECK(!ok || json_is_boolean(ok));
    CHECK(!kind || json_is_null(kind) ||
          (json_is_string(kind) && !strcmp(json_string_value(kind), "x")));
    CHECK(!note || (json_is_string(note) && utf8_chars(json_string_value(note)) <= 5));
    json_decref(j);
    return 0;
}

static int test_greedy_masked_generation_always_satisfies_the_schema(void)
{
    tiny_vocab tv;
    tiny_vocab_fill(&tv);
    hx_grammar_vocab *v = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_grammar_vocab_init(tv.bytes, tv.lens, tv.n, &tv.end_id, 1, &v, &err), HX_OK);
    hx_grammar *g = compile_schema(k_gen_schema);
    CHECK(g != NULL);
    static char text[1 << 16];
    size_t total = 0;
    const uint32_t n_seeds = 300;
    for (uint32_t seed = 1; seed <= n_seeds; seed++) {
        uint32_t rng = seed * 2654435761u;
        hx_grammar_state *s = hx_grammar_start(g);
        CHECK(s != NULL);
        size_t len = 0;
        bool ended = false;
        for (int step = 0; step < 20000 && !ended; step++) {
            uint8_t allowed[400];
            CHECK_EQ(hx_grammar_mask(s, v, allowed), HX_OK);
            int32_t best = -1;
            float best_score = -1;
            for (int32_t id = 0; id < tv.n; id++) {
                const float score = check_rng_unit(&rng);
                if (allowed[id] && score > best_score) best = id, best_score = score;
            }
            if (best < 0) CHECK_FAIL("seed %u: no token allowed after %.*s", seed, (int)len, text);
            if (best == tv.end_id) {
                ended = true;
                break;
            }
            CHECK(hx_grammar_accept_bytes(s, tv.bytes[best], tv.lens[best]));
            CHECK(len + tv.lens[best] < sizeof text);
            memcpy(text + len, tv.bytes[best], tv.lens[best]);
            len += tv.lens[best];
        }
        text[len] = '\0';
        if (!ended) CHECK_FAIL("seed %u: no end after 20000 tokens: %.200s", seed, text);
        CHECK(hx_grammar_done(s));
        CHECK_EQ(check_gen_instance(text), 0);
        if (seed == 1) printf("seed 1 generated: %s\n", text);
        total += len;
        hx_grammar_state_free(s);
    }
    printf("%u generations, %.1f bytes on average\n", n_seeds, (double)total / n_seeds);
    hx_grammar_free(g);
    hx_grammar_vocab_free(v);
    return 0;
}

/* 49k random BPE-like tokens: the 256 bytes, then 1 to 9 characters of JSON-ish text, some
 * starting with a space; the last id is the end token. */
enum { N_BIG = 49152 };
static const char *g_big_bytes[N_BIG];
static size_t g_big_lens[N_BIG];

static hx_grammar_vocab *big_vocab(void)
{
    static char blob[N_BIG * 12];
    static const char alphabet[] = "etaoinshrdlucmfwypvbgkqjxz\"{}[]:,. 0123456789_-'\n";
    uint32_t rng = 12345;
    size_t at = 0;
    for (int32_t id = 0; id < N_BIG; id++) {
        size_t n = id < 256 ? 1 : 1 + check_rng(&rng) % 9;
        g_big_bytes[id] = blob + at;
        for (size_t k = 0; k < n; k++)
            blob[at++] = id < 256 ? (char)id
                                  : (k == 0 && check_rng(&rng) % 2) ? ' '
                                  : alphabet[check_rng(&rng) % (sizeof alphabet - 1)];
        g_big_lens[id] = n;
    }
    int32_t end_id = N_BIG - 1;
    hx_grammar_vocab *v = NULL;
    hx_err err = { 0 };
    if (hx_grammar_vocab_init(g_big_bytes, g_big_lens, N_BIG, &end_id, 1, &v, &err) != HX_OK)
        fprintf(stderr, "big vocab: %s\n", err.msg);
    return v;
}

/* The mask's shortcuts (remembered steps, plain subtrees allowed whole) against accepting every
 * token on a copy of the state, where most tokens fit and where few do. */
static int test_mask_matches_brute_force_on_a_large_vocabulary(void)
{
    static uint8_t allowed[N_BIG];
    hx_grammar_vocab *v = big_vocab();
    CHECK(v != NULL);
    const char *text = hx_json_object_grammar();
    hx_grammar *g = compile(text);
    CHECK(g != NULL);
    static const char *const where[] = { "", "{\"", "{\"ab", "{\"a\": [1, {\"b\": \"x y",
                                         "{\"a\": \"\\", "{\"a\": 12", "{\"a\": \"\xE6\x97" };
    for (size_t w = 0; w < HX_COUNTOF(where); w++) {
        hx_grammar_state *s = hx_grammar_start(g);
        CHECK(s && hx_grammar_accept_bytes(s, where[w], strlen(where[w])));
        CHECK_EQ(hx_grammar_mask(s, v, allowed), HX_OK);
        int n_allowed = 0;
        for (int32_t id = 0; id < N_BIG - 1; id++) {
            hx_grammar_state *c = hx_grammar_state_copy(s);
            CHECK(c != NULL);
            const bool want = hx_grammar_accept_bytes(c, g_big_bytes[id], g_big_lens[id]);
            hx_grammar_state_free(c);
            if (allowed[id] != want)
                CHECK_FAIL("after '%s', token %d '%.*s': mask %d, brute force %d", where[w],
                           (int)id, (int)g_big_lens[id], g_big_bytes[id], allowed[id], want);
            n_allowed += want;
        }
        CHECK_EQ(allowed[N_BIG - 1], hx_grammar_done(s));
        printf("after '%s': %d tokens allowed\n", where[w], n_allowed);
        hx_grammar_state_free(s);
    }
    hx_grammar_free(g);
    hx_grammar_vocab_free(v);
    return 0;
}

/* Not an assertion: prints how long a mask takes for a 30-property schema over the large
 * vocabulary, at the start and inside a string (the widest case). */
static int test_mask_timing_print_for_a_large_vocabulary(void)
{
    static uint8_t allowed[N_BIG];
    hx_grammar_vocab *v = big_vocab();
    CHECK(v != NULL);
    char schema[8192];
    size_t n = (size_t)snprintf(schema, sizeof schema, "{\"type\":\"object\",\"properties\":{");
    static const char *const types[] = { "string", "integer", "boolean", "number" };
    for (int i = 0; i < 30; i++)
        n += (size_t)snprintf(schema + n, sizeof schema - n, "%s\"field_%d\":{\"type\":\"%s\"}",
                              i ? "," : "", i, types[i % 4]);
    snprintf(schema + n, sizeof schema - n, "},\"required\":[\"field_0\",\"field_5\"]}");
    hx_grammar *g = compile_schema(schema);
    CHECK(g != NULL);
    static const char *const where[] = { "", "{\"field_0\": \"abc", "{\"field_0\": \"x\", \"" };
    for (size_t w = 0; w < HX_COUNTOF(where); w++) {
        hx_grammar_state *s = hx_grammar_start(g);
        CHECK(s && hx_grammar_accept_bytes(s, where[w], strlen(where[w])));
        CHECK_EQ(hx_grammar_mask(s, v, allowed), HX_OK); /* warm: scratch sized */
        const int reps = 20;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int r = 0; r < reps; r++) CHECK_EQ(hx_grammar_mask(s, v, allowed), HX_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        int n_allowed = 0;
        for (int32_t id = 0; id < N_BIG; id++) n_allowed += allowed[id];
        const double ms = ((double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                           (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / reps;
        printf("mask after '%s': %.3f ms, %d of %d tokens allowed\n", where[w], ms, n_allowed,
               N_BIG);
        hx_grammar_state_free(s);
    }
    hx_grammar_free(g);
    hx_grammar_vocab_free(v);
    return 0;
}

static int test_vocab_hands_back_each_tokens_bytes(void)
{
    tiny_vocab tv;
    tiny_vocab_fill(&tv);
    hx_grammar_vocab *v = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_grammar_vocab_init(tv.bytes, tv.lens, tv.n, &tv.end_id, 1, &v, &err), HX_OK);
    for (int32_t id = 0; id < tv.n; id++) {
        size_t len = 99;
        const char *b = hx_grammar_vocab_token(v, id, &len);
        CHECK(b != tv.bytes[id]); /* a copy */
        CHECK_EQ(len, tv.lens[id]);
        CHECK(memcmp(b, tv.bytes[id], len) == 0);
        CHECK_EQ(hx_grammar_vocab_is_end(v, id), id == tv.end_id);
    }
    size_t len = 99;
    CHECK_EQ(hx_grammar_vocab_token(v, -1, &len)[0], '\0');
    CHECK_EQ(len, 0);
    len = 99;
    hx_grammar_vocab_token(v, tv.n, &len);
    CHECK_EQ(len, 0);
    CHECK(!hx_grammar_vocab_is_end(v, tv.n));
    hx_grammar_vocab_free(v);
    /* an end token given with bytes matches none */
    const char *const bytes[2] = { "a", "</s>" };
    const size_t lens[2] = { 1, 4 };
    const int32_t end = 1;
    CHECK_EQ(hx_grammar_vocab_init(bytes, lens, 2, &end, 1, &v, &err), HX_OK);
    hx_grammar_vocab_token(v, 1, &len);
    CHECK_EQ(len, 0);
    CHECK(hx_grammar_vocab_is_end(v, 1));
    hx_grammar_vocab_free(v);
    return 0;
}

/* The mask remembers steps per stack set; an allocation failing anywhere in it must still never
 * allow a token the grammar refuses, and must leave nothing behind. */
static int test_mask_under_failing_allocations_allows_no_refused_token(void)
{
    tiny_vocab tv;
    tiny_vocab_fill(&tv);
    hx_grammar_vocab *v = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_grammar_vocab_init(tv.bytes, tv.lens, tv.n, &tv.end_id, 1, &v, &err), HX_OK);
    hx_grammar *g = compile_schema(k_gen_schema);
    CHECK(g != NULL);
    hx_grammar_state *s = hx_grammar_start(g);
    CHECK(s && hx_grammar_accept_bytes(s, "{\"name\": \"a", 11));
    uint8_t truth[400], got[400];
    CHECK_EQ(hx_grammar_mask(s, v, truth), HX_OK);
    const size_t live = hx_alloc_live_bytes();
    int n_equal = 0;
    for (int64_t k = 0; k < 300; k++) {
        hx_grammar_state *c = hx_grammar_state_copy(s); /* no mask scratch yet */
        CHECK(c != NULL);
        hx_alloc_fail_after(k);
        const hx_status st = hx_grammar_mask(c, v, got);
        hx_alloc_fail_after(-1);
        CHECK(st == HX_OK || st == HX_E_NOMEM);
        for (int32_t id = 0; id < tv.n; id++)
            if (got[id] && !truth[id]) CHECK_FAIL("k %d: token %d allowed", (int)k, (int)id);
        n_equal += memcmp(got, truth, (size_t)tv.n) == 0;
        hx_grammar_state_free(c);
        CHECK_EQ(hx_alloc_live_bytes(), live);
    }
    CHECK(n_equal > 0); /* once the failure comes late enough, the mask is whole */
    hx_grammar_state_free(s);
    hx_grammar_free(g);
    hx_grammar_vocab_free(v);
    return 0;
}

/* ---- a tokenizer built in memory ---- */

/* The GPT-2 byte -> character table (as tests/tools/tiny_server.h builds it). */
static uint32_t byte_cp(int b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return (uint32_t)b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++)
        n += !((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE);
    return 0x100 + n;
}

/* Byte-level BPE with no merges: ids 0..255 the bytes, 256 "{\"", 257 " true" (as "Ġtrue"),
 * 258 "é" (as "Ã©"), then the special tokens 259 <|endoftext|> and 260 <|im_start|>. */
static hx_tokenizer *tiny_tokenizer(void)
{
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        const uint32_t cp = byte_cp(b);
        char c[3] = { 0 };
        if (cp < 0x80) c[0] = (char)cp;
        else c[0] = (char)(0xC0 | cp >> 6), c[1] = (char)(0x80 | (cp & 0x3F));
        json_object_set_new(vocab, c, json_integer(b));
    }
    json_object_set_new(vocab, "{\"", json_integer(256));
    json_object_set_new(vocab, "\xC4\xA0true", json_integer(257));
    json_object_set_new(vocab, "\xC3\x83\xC2\xA9", json_integer(258));
    json_t *tj = json_pack(
        "{s:[{s:i, s:s, s:b}, {s:i, s:s, s:b}], s:{s:s, s:b, s:b}, s:{s:s}, s:{s:s, s:o, s:[]}}",
        "added_tokens", "id", 259, "content", "<|endoftext|>", "special", 1, "id", 260,
        "content", "<|im_start|>", "special", 1, "pre_tokenizer", "type", "ByteLevel",
        "add_prefix_space", 0, "use_regex", 1, "decoder", "type", "ByteLevel", "model", "type",
        "BPE", "vocab", vocab, "merges");
    char *text = tj ? json_dumps(tj, JSON_COMPACT) : NULL;
    json_decref(tj);
    hx_tokenizer *t = NULL;
    hx_err err = { 0 };
    if (!text || hx_tokenizer_open_json_memory(text, strlen(text), "tiny", &t, &err) != HX_OK)
        fprintf(stderr, "tiny tokenizer: %s\n", err.msg);
    free(text);
    return t;
}

static int test_vocab_from_a_byte_level_tokenizer_recovers_token_bytes(void)
{
    hx_tokenizer *t = tiny_tokenizer();
    CHECK(t != NULL);
    hx_grammar_vocab *v = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_grammar_vocab_from_tokenizer(t, &v, &err), HX_OK);
    const int32_t n = hx_grammar_vocab_n_vocab(v);
    CHECK_EQ(n, hx_tokenizer_n_vocab(t));
    size_t len = 0;
    const char *tb = hx_grammar_vocab_token(v, 257, &len);
    CHECK(len == 5 && memcmp(tb, " true", 5) == 0); /* "Ġtrue" */
    tb = hx_grammar_vocab_token(v, 258, &len);
    CHECK(len == 2 && memcmp(tb, "\xC3\xA9", 2) == 0);
    hx_grammar_vocab_token(v, 260, &len); /* special */
    CHECK_EQ(len, 0);
    hx_grammar_vocab_token(v, 259, &len); /* <|endoftext|>: an end token */
    CHECK(len == 0 && hx_grammar_vocab_is_end(v, 259) && !hx_grammar_vocab_is_end(v, 260));
    uint8_t *allowed = hx_alloc((size_t)n);
    CHECK(allowed != NULL);
    hx_grammar *g = compile("root ::= \"{\\\"\" \" true\" \"\xC3\xA9\"");
    CHECK(g != NULL);
    hx_grammar_state *s = hx_grammar_start(g);
    CHECK_EQ(hx_grammar_mask(s, v, allowed), HX_OK);
    int n_allowed = 0;
    for (int32_t id = 0; id < n; id++) n_allowed += allowed[id];
    CHECK(allowed['{'] && allowed[256]);
    CHECK_EQ(n_allowed, 2);
    CHECK(hx_grammar_accept_bytes(s, "{\"", 2));
    CHECK_EQ(hx_grammar_mask(s, v, allowed), HX_OK);
    CHECK(allowed[' '] && allowed[257] && !allowed[259]);
    CHECK(hx_grammar_accept_bytes(s, " true", 5));
    CHECK_EQ(hx_grammar_mask(s, v, allowed), HX_OK);
    CHECK(allowed[258] && allowed[0xC3] && !allowed[260]);
    CHECK(hx_grammar_accept_bytes(s, "\xC3\xA9", 2) && hx_grammar_done(s));
    CHECK_EQ(hx_grammar_mask(s, v, allowed), HX_OK);
    size_t n_eot = 0;
    const int32_t *eot = hx_tokenizer_eot(t, &n_eot);
    n_allowed = 0;
    for (int32_t id = 0; id < n; id++) n_allowed += allowed[id];
    CHECK_EQ(n_allowed, (int64_t)n_eot); /* only the end tokens, and never <|im_start|> */
    for (size_t i = 0; i < n_eot; i++) CHECK(allowed[eot[i]]);
    CHECK(!allowed[260]);
    hx_grammar_state_free(s);
    hx_grammar_free(g);
    hx_free(allowed);
    hx_grammar_vocab_free(v);
    hx_tokenizer_close(t);
    return 0;
}

static int test_failed_allocations_leave_nothing_behind(void)
{
    static const char schema[] = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\","
                                 "\"items\":{\"type\":\"string\",\"maxLength\":4}},\"n\":{\"type\":"
                                 "\"integer\",\"minimum\":-120,\"maximum\":456}}}";
    json_t *js = json_loads(schema, 0, NULL);
    CHECK(js != NULL);
    const size_t live = hx_alloc_live_bytes();
    for (int64_t k = 0; k < 400; k++) {
        hx_alloc_fail_after(k);
        char *text = NULL;
        hx_err err = { 0 };
        hx_grammar *g = NULL;
        if (hx_json_schema_to_grammar(js, &text, &err) == HX_OK) {
            err = (hx_err){ 0 };
            if (hx_grammar_compile(text, strlen(text), &g, &err) == HX_OK) {
                hx_grammar_state *s = hx_grammar_start(g);
                if (s) hx_grammar_accept_bytes(s, "{\"a\":[\"x\"", 9);
                hx_grammar_state_free(s);
            } else {
                CHECK(err.msg[0] != '\0');
            }
        } else {
            CHECK(err.msg[0] != '\0');
        }
        hx_alloc_fail_after(-1);
        hx_grammar_free(g);
        hx_free(text);
        CHECK_EQ(hx_alloc_live_bytes(), live);
    }
    json_decref(js);
    return 0;
}

static const check_case cases[] = {
    { "compile_errors_name_line_and_column", test_compile_errors_name_line_and_column },
    { "literals_classes_and_repetition_accept_the_right_strings", test_literals_classes_and_repetition_accept_the_right_strings },
    { "recursion_accepts_nested_structures", test_recursion_accepts_nested_structures },
    { "exploding_ambiguity_is_refused_not_hung", test_exploding_ambiguity_is_refused_not_hung },
    { "classes_take_utf8_characters_byte_by_byte", test_classes_take_utf8_characters_byte_by_byte },
    { "schema_object_properties_in_order_with_optional_ones", test_schema_object_properties_in_order_with_optional_ones },
    { "schema_nested_arrays_enum_anyof_and_refs", test_schema_nested_arrays_enum_anyof_and_refs },
    { "schema_pattern_constrains_string_content", test_schema_pattern_constrains_string_content },
    { "json_object_mode_accepts_any_object", test_json_object_mode_accepts_any_object },
    { "unsupported_keywords_are_refused_by_name", test_unsupported_keywords_are_refused_by_name },
    { "schema_integer_bounds_accept_exactly_the_range", test_schema_integer_bounds_accept_exactly_the_range },
    { "schema_integer_bounds_keep_the_sixteen_digit_cap", test_schema_integer_bounds_keep_the_sixteen_digit_cap },
    { "schema_integer_bounds_exclusive_and_real_valued", test_schema_integer_bounds_exclusive_and_real_valued },
    { "schema_integer_bound_errors_name_the_problem", test_schema_integer_bound_errors_name_the_problem },
    { "mask_allows_exactly_the_tokens_that_keep_the_state_alive", test_mask_allows_exactly_the_tokens_that_keep_the_state_alive },
    { "mask_after_the_first_allocates_nothing", test_mask_after_the_first_allocates_nothing },
    { "greedy_masked_generation_always_satisfies_the_schema", test_greedy_masked_generation_always_satisfies_the_schema },
    { "mask_matches_brute_force_on_a_large_vocabulary", test_mask_matches_brute_force_on_a_large_vocabulary },
    { "mask_timing_print_for_a_large_vocabulary", test_mask_timing_print_for_a_large_vocabulary },
    { "vocab_from_a_byte_level_tokenizer_recovers_token_bytes", test_vocab_from_a_byte_level_tokenizer_recovers_token_bytes },
    { "vocab_hands_back_each_tokens_bytes", test_vocab_hands_back_each_tokens_bytes },
    { "mask_under_failing_allocations_allows_no_refused_token", test_mask_under_failing_allocations_allows_no_refused_token },
    { "failed_allocations_leave_nothing_behind", test_failed_allocations_leave_nothing_behind },
};
CHECK_MAIN(cases)
