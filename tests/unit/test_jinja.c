/* test_jinja.c - the chat-template engine (src/template/jinja.h): lexer whitespace rules,
 * statements, expressions, filters, tests, Python value printing, tojson, Undefined, errors with
 * line and column, limits against hostile templates, allocation fault injection and concurrent
 * renders. Expected outputs are what Python jinja2 3.1 renders under transformers' settings. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "template/jinja.h"

/* Renders tpl with the JSON context ctx (NULL: none). Returns a hx_alloc'd string, or NULL
 * with the failure in err. */
static char *render_lim(const char *tpl, const char *ctx, const hx_template_limits *lim,
                        hx_err *err)
{
    hx_template *t = NULL;
    json_t *c = NULL;
    char *out = NULL;
    if (ctx && !(c = json_loads(ctx, 0, NULL))) {
        hx_err_set(err, HX_E_INVALID, "bad test JSON");
        return NULL;
    }
    if (hx_template_compile(tpl, strlen(tpl), &t, err) == HX_OK)
        hx_template_render_ex(t, c, lim, &out, NULL, err);
    hx_template_free(t);
    json_decref(c);
    return out;
}

static char *render(const char *tpl, const char *ctx, hx_err *err)
{
    return render_lim(tpl, ctx, NULL, err);
}

/* Checks that tpl renders to want. */
#define CHECK_RENDER(tpl, ctx, want)                                          \
    do {                                                                      \
        hx_err e_ = {0};                                                      \
        char *got_ = render((tpl), (ctx), &e_);                               \
        if (!got_) CHECK_FAIL("render failed: %s\n  template: %s", e_.msg, (tpl)); \
        int same_ = strcmp(got_, (want)) == 0;                                \
        if (!same_) {                                                         \
            fprintf(stderr, "%s:%d: template %s\n  got  \"%s\"\n  want \"%s\"\n", \
                    __FILE__, __LINE__, (tpl), got_, (want));                 \
            hx_free(got_);                                                    \
            return 1;                                                         \
        }                                                                     \
        hx_free(got_);                                                        \
    } while (0)

/* Checks that tpl fails and the message contains needle. */
#define CHECK_FAILS(tpl, ctx, needle)                                         \
    do {                                                                      \
        hx_err e_ = {0};                                                      \
        char *got_ = render((tpl), (ctx), &e_);                               \
        if (got_) {                                                           \
            fprintf(stderr, "%s:%d: expected a failure, got \"%s\"\n", __FILE__, __LINE__, got_); \
            hx_free(got_);                                                    \
            return 1;                                                         \
        }                                                                     \
        CHECK_CONTAINS(e_.msg, (needle));                                     \
    } while (0)

static int test_whitespace_control_minus_and_plus(void)
{
    CHECK_RENDER("a  {{- 'b' -}}  c", NULL, "abc");
    CHECK_RENDER("a\n  {%- if true %}x{% endif -%}\n  b", NULL, "axb");
    CHECK_RENDER("a\n  {%+ if true %}x{% endif %}", NULL, "a\n  x");
    CHECK_RENDER("{# c -#}\n\n  x", NULL, "x");
    CHECK_RENDER("a {#- c #} b", NULL, "a b");
    return 0;
}

static int test_trim_and_lstrip_blocks_as_transformers(void)
{
    /* trim_blocks eats the newline after a block tag; lstrip_blocks the indent before it */
    CHECK_RENDER("{% for x in [1, 2] %}\n    {% if x %}\n  {{ x }}\n    {% endif %}\n{% endfor %}",
                 NULL, "  1\n  2\n");
    CHECK_RENDER("  {{ 'v' }}\n", NULL, "  v");        /* expressions are not lstripped */
    CHECK_RENDER("x {% if true %}y{% endif %}", NULL, "x y"); /* not at line start: kept */
    CHECK_RENDER("  {# note #}\nz", NULL, "z");
    return 0;
}

static int test_newlines_normalised_trailing_dropped(void)
{
    CHECK_RENDER("a\r\nb\rc\n", NULL, "a\nb\nc");
    CHECK_RENDER("a\n\n", NULL, "a\n");
    CHECK_RENDER("{{ 'x' }}\n", NULL, "x");
    return 0;
}

static int test_raw_block_is_verbatim(void)
{
    CHECK_RENDER("{% raw %}{{ not }}{% if %}{% endraw %}", NULL, "{{ not }}{% if %}");
    return 0;
}

static int test_loop_variables(void)
{
    CHECK_RENDER("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                 "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};"
                 "{% endfor %}",
                 NULL, "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
    CHECK_RENDER("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}"
                 "{{ loop.cycle('a', 'b') }},{% endfor %}",
                 NULL, "-2a,1-3b,2-a,");
    CHECK_RENDER("{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor %}", NULL,
                 "TrueFalseTrue");
    return 0;
}

static int test_loop_else_filter_and_unpacking(void)
{
    CHECK_RENDER("{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
    CHECK_RENDER("{% for x in range(6) if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}", NULL,
                 "1/3 3/3 5/3 ");
    CHECK_RENDER("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                 "{\"d\":{\"b\":1,\"a\":2}}",
                 "b=1;a=2;");
    CHECK_RENDER("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", NULL, "37");
    CHECK_RENDER("{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", NULL, "xy");
    return 0;
}

static int test_loop_controls(void)
{
    CHECK_RENDER("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
                 "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
                 NULL, "013");
    return 0;
}

static int test_scoping_matches_jinja2(void)
{
    /* each iteration starts from the outer value; nothing leaks out of the loop */
    CHECK_RENDER("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{{ x }}{% endfor %}"
                 "{{ x }}",
                 NULL, "0001020");
    CHECK_RENDER("{% if true %}{% set y = 3 %}{% endif %}{{ y }}", NULL, "3");
    CHECK_RENDER("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
                 "{% endfor %}{{ ns.n }}",
                 NULL, "6");
    /* a macro sees its defining scope as it is at call time */
    CHECK_RENDER("{% macro m() %}{{ v }}{% endmacro %}{% set v = 7 %}{{ m() }}", NULL, "7");
    return 0;
}

static int test_set_block_filter_block_and_generation(void)
{
    CHECK_RENDER("{% set s %}Hi {{ 'x' }}{% endset %}[{{ s }}]", NULL, "[Hi x]");
    CHECK_RENDER("{% set s | upper %}abc{% endset %}{{ s }}", NULL, "ABC");
    CHECK_RENDER("{% filter upper %}a{{ 'b' }}{% endfilter %}", NULL, "AB");
    CHECK_RENDER("{% generation %}gen{% set z = 1 %}{% endgeneration %}{{ z }}", NULL, "gen");
    return 0;
}

static int test_macros_defaults_kwargs_varargs_caller(void)
{
    CHECK_RENDER("{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }} {{ f(1, b=5) }} "
                 "{{ f(b=3, a=4) }}",
                 NULL, "1-2 1-5 4-3");
    CHECK_RENDER("{% macro f() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, k='v') }}", NULL,
                 "(1, 2){'k': 'v'}");
    CHECK_RENDER("{% macro w(t) %}<{{ t }}>{{ caller() }}</{{ t }}>{% endmacro %}"
                 "{% call w('p') %}body{% endcall %}",
                 NULL, "<p>body</p>");
    CHECK_RENDER("{% macro w() %}{{ caller(3) }}{% endmacro %}"
                 "{% call(n) w() %}n={{ n }}{% endcall %}",
                 NULL, "n=3");
    CHECK_RENDER("{% macro f(a) %}[{{ a }}]{% endmacro %}{{ f() }}", NULL, "[]");
    CHECK_FAILS("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", NULL, "takes not more than 1");
    CHECK_FAILS("{% macro f(a) %}{% endmacro %}{{ f(z=1) }}", NULL, "no keyword argument 'z'");
    return 0;
}

static int test_python_value_printing(void)
{
    CHECK_RENDER("{{ none }} {{ true }} {{ False }} {{ 42 }} {{ -7 }}", NULL,
                 "None True False 42 -7");
    CHECK_RENDER("{{ 1.0 }} {{ 0.5 }} {{ 1e-05 }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ 1e15 }} "
                 "{{ 2.5e-4 }}",
                 NULL, "1.0 0.5 1e-05 1e+16 0.30000000000000004 1000000000000000.0 0.00025");
    CHECK_RENDER("{{ [1, 'a', none, true, 1.5] }}", NULL, "[1, 'a', None, True, 1.5]");
    CHECK_RENDER("{{ {'a': [1, {'b': 'c'}]} }}", NULL, "{'a': [1, {'b': 'c'}]}");
    CHECK_RENDER("{{ (1,) }} {{ (1, 2) }} {{ () }}", NULL, "(1,) (1, 2) ()");
    CHECK_RENDER("{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', '\\x01'] }}", NULL,
                 "[\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', '\\x01']");
    CHECK_RENDER("{{ m }}", "{\"m\":{\"role\":\"user\",\"n\":2.0,\"u\":\"\\u00e9\\u200b\"}}",
                 "{'role': 'user', 'n': 2.0, 'u': '\xc3\xa9\\u200b'}");
    return 0;
}

static int test_tojson_as_transformers(void)
{
    const char *ctx = "{\"v\":{\"b\":[1,2.5,null,true],\"a\":\"\\u00e9\\\"<\\n\",\"e\":{}}}";
    CHECK_RENDER("{{ v | tojson }}", ctx,
                 "{\"b\": [1, 2.5, null, true], \"a\": \"\xc3\xa9\\\"<\\n\", \"e\": {}}");
    CHECK_RENDER("{{ v | tojson(indent=2) }}", ctx,
                 "{\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"a\": "
                 "\"\xc3\xa9\\\"<\\n\",\n  \"e\": {}\n}");
    CHECK_RENDER("{{ v.a | tojson(ensure_ascii=true) }}", ctx, "\"\\u00e9\\\"<\\n\"");
    CHECK_RENDER("{{ v | tojson(sort_keys=true) }}", ctx,
                 "{\"a\": \"\xc3\xa9\\\"<\\n\", \"b\": [1, 2.5, null, true], \"e\": {}}");
    CHECK_RENDER("{{ [1, 2] | tojson(separators=(',', ':')) }}", NULL, "[1,2]");
    CHECK_RENDER("{{ 1.0 | tojson }} {{ 'x' | tojson }}", NULL, "1.0 \"x\"");
    CHECK_FAILS("{{ nope | tojson }}", NULL, "not JSON serializable");
    return 0;
}

static int test_filters(void)
{
    CHECK_RENDER("{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'ab' | upper }}|"
                 "{{ 'AB' | lower }}|{{ 'hello wORLD-x(y' | title }}|{{ 'aBC' | capitalize }}",
                 NULL, "a b|a|AB|ab|Hello World-X(Y|Abc");
    CHECK_RENDER("{{ 'aaa' | replace('a', 'b', 2) }}|{{ [1, 2] | join(', ') }}|"
                 "{{ u | default('d') }}|{{ '' | default('e', true) }}|{{ [1, 2, 3] | length }}|"
                 "{{ 'héllo' | length }}|{{ [4, 5] | first }}{{ [4, 5] | last }}",
                 NULL, "bba|1, 2|d|e|3|5|45");
    const char *people = "{\"p\":[{\"n\":\"b\",\"age\":3,\"t\":{\"x\":1}},"
                         "{\"n\":\"a\",\"age\":1},{\"n\":\"c\",\"age\":2}]}";
    CHECK_RENDER("{{ p | selectattr('age', 'gt', 1) | map(attribute='n') | join }}|"
                 "{{ p | rejectattr('t') | map(attribute='n') | list }}|"
                 "{{ p | selectattr('t', 'defined') | list | length }}|"
                 "{{ p | sort(attribute='age') | map(attribute='n') | join }}|"
                 "{{ p | map(attribute='age') | sum }}|{{ p | map(attribute='n') | max }}",
                 people, "bc|['a', 'c']|1|acb|6|c");
    CHECK_RENDER("{{ [3, 1, 2] | sort(reverse=true) }}|{{ ['b', 'A', 'a'] | unique | list }}|"
                 "{{ {'b': 1, 'a': 2} | dictsort }}|{{ [1, 2, 3] | reverse | list }}|"
                 "{{ 'abc' | reverse }}|{{ {'k': 'v'} | items | list }}",
                 NULL, "[3, 2, 1]|['b', 'A']|[('a', 2), ('b', 1)]|[3, 2, 1]|cba|[('k', 'v')]");
    CHECK_RENDER("{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int(7) }} {{ '3.5' | float }} "
                 "{{ -3 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 7 | round }} "
                 "{{ 2.7 | round(method='floor') }}",
                 NULL, "42 4 7 3.5 3 2.0 3.14 7 2.0");
    CHECK_RENDER("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}", NULL,
                 "a\n  b\n\n  c|  a\n  b");
    CHECK_RENDER("{{ 'foo bar baz qux' | truncate(9) }}|{{ 'one two' | wordcount }}|"
                 "{{ 'ab' | center(6) }}|{{ '%s-%d' | format('x', 3) }}|"
                 "{{ [1, 2, 3] | batch(2) | list }}",
                 NULL, "foo...|2|  ab  |x-3|[[1, 2], [3]]");
    CHECK_RENDER("{{ [1, 0, 2] | select | list }}{{ [1, 2, 3] | reject('odd') | list }}"
                 "{{ ['a', 'b'] | map('upper') | join }}",
                 NULL, "[1, 2][2]AB");
    /* generators: always true, no len() */
    CHECK_RENDER("{{ 'yes' if [] | select else 'no' }}", NULL, "yes");
    CHECK_FAILS("{{ [1] | select | length }}", NULL, "has no len()");
    return 0;
}

static int test_tests(void)
{
    CHECK_RENDER("{{ x is defined }}{{ u is defined }}{{ none is none }}{{ 's' is string }}"
                 "{{ {} is mapping }}{{ [] is iterable }}{{ 's' is sequence }}{{ 1 is number }}"
                 "{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ false is boolean }}",
                 "{\"x\":1}", "TrueFalseTrueTrueTrueTrueTrueTrueTrueFalseTrueTrue");
    CHECK_RENDER("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is eq 'a' }}"
                 "{{ 2 is in [1, 2] }}{{ true is true }}{{ 1 is true }}{{ 'x' is not string }}"
                 "{{ 1 is equalto(1) }}{{ 2 is gt 1 }}",
                 NULL, "TrueTrueTrueTrueTrueTrueFalseFalseTrueTrue");
    return 0;
}

static int test_string_and_dict_methods(void)
{
    CHECK_RENDER("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(none, 1) }}"
                 "{{ 'a,b,c'.rsplit(',', 1) }}",
                 NULL, "['a', 'b', '', 'c']['a', 'b']['a', 'b c']['a,b', 'c']");
    CHECK_RENDER("{{ '  x '.strip() }}|{{ 'xxyxx'.lstrip('x') }}|{{ 'abc'.startswith('ab') }}"
                 "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'héllo'.find('l') }}|{{ 'aaa'.count('a') }}|"
                 "{{ 'a\\nb'.splitlines() }}|{{ \"it's a test\".title() }}|"
                 "{{ '-'.join(['a', 'b']) }}|"
                 "{{ 'a b'.replace(' ', '_') }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}",
                 NULL, "x|yxx|TrueTrue|2|3|['a', 'b']|It'S A Test|a-b|a_b|HIhi");
    const char *ctx = "{\"d\":{\"content\":\"c\",\"items\":\"key\"}}";
    CHECK_RENDER("{{ d.content }}{{ d['content'] }}{{ d.get('x', 'dflt') }}{{ d.get('x') }}"
                 "{{ d.keys() | list }}{{ d['items'] }}",
                 ctx, "ccdfltNone['content', 'items']key");
    CHECK_RENDER("{{ [1, 2, 3][1:] }}{{ 'hello'[::-1] }}{{ [1, 2][-1] }}{{ 'héllo'[1] }}", NULL,
                 "[2, 3]olleh2\xc3\xa9");
    return 0;
}

static int test_undefined_semantics(void)
{
    CHECK_RENDER("[{{ u }}]{{ u is defined }}{{ 'T' if not u }}{% for x in u %}no{% endfor %}"
                 "{{ u | length }}{{ u ~ 'x' }}{{ u | default('d') }}{{ u == u }}",
                 NULL, "[]FalseT0xdTrue");
    CHECK_RENDER("{{ d.missing }}|{{ none.attr }}|{{ [1][5] }}|{{ d.a.b }}", "{\"d\":{\"a\":1}}",
                 "|||");
    CHECK_FAILS("{{ d.missing.deeper }}", "{\"d\":{}}", "'dict object' has no attribute 'missing'");
    CHECK_FAILS("{{ u.x }}", NULL, "'u' is undefined");
    CHECK_FAILS("{{ u + 1 }}", NULL, "'u' is undefined");
    CHECK_FAILS("{{ u() }}", NULL, "'u' is undefined");
    return 0;
}

static int test_markup_escapes_when_mixed(void)
{
    CHECK_RENDER("{{ 'a<'|safe + \"'b&\" }}", NULL, "a<&#39;b&amp;");
    CHECK_RENDER("{{ \"x\" + ('<y>'|safe) }}", NULL, "x<y>");
    CHECK_RENDER("{{ ('<a>'|safe) ~ '<b>' }}", NULL, "<a><b>");
    CHECK_RENDER("{{ '<a>' | e }}", NULL, "&lt;a&gt;");
    return 0;
}

static int test_operators(void)
{
    CHECK_RENDER("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 6 / 2 }} "
                 "{{ 2 ** 3 ** 2 }} "
                 "{{ -2 ** 2 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}",
                 NULL, "3 -4 -2 3.5 3.0 64 4 0.5 3.0 0.5");
    CHECK_RENDER("{{ 'ab' * 2 }} {{ [0] * 3 }} {{ [1] + [2] }} {{ 1 ~ 'a' ~ none }} "
                 "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' in 'abc' }} {{ 1 not in [1] }} "
                 "{{ 1 == 1.0 }} {{ true == 1 }} {{ '1' == 1 }}",
                 NULL, "abab [0, 0, 0] [1, 2] 1aNone True False True False True True False");
    CHECK_RENDER("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ 'a' if false }}|"
                 "{{ 'a' if 0 else 'b' if 1 else 'c' }}",
                 NULL, "x y [] |b");
    CHECK_FAILS("{{ 'a' + 1 }}", NULL, "unsupported operand");
    CHECK_FAILS("{{ 1 / 0 }}", NULL, "division by zero");
    CHECK_FAILS("{{ 1 < 'a' }}", NULL, "not supported");
    return 0;
}

static int test_string_literal_escapes(void)
{
    CHECK_RENDER("{{ 'a\\tb\\n\\\\\\'\\\"' }}", NULL, "a\tb\n\\'\"");
    CHECK_RENDER("{{ '\\u00e9\\x41\\101\\U0001F600' }}", NULL, "\xc3\xa9" "AA\xf0\x9f\x98\x80");
    CHECK_RENDER("{{ '\\d\\q' }}", NULL, "\\d\\q");
    CHECK_RENDER("{{ 'ab' 'cd' }}", NULL, "abcd");
    CHECK_RENDER("{{ 0x1F }} {{ 0b101 }} {{ 1_000 }} {{ 1.5e3 }}", NULL, "31 5 1000 1500.0");
    return 0;
}

static int test_errors_carry_line_and_column(void)
{
    CHECK_FAILS("line one\n{% if x %}\nno end", NULL, "line 3");
    CHECK_FAILS("line one\n{% if x %}\nno end", NULL, "'endif'");
    CHECK_FAILS("\n\n  {{ x | nosuch }}", NULL, "line 3, column 10: no filter named 'nosuch'");
    CHECK_FAILS("{% if a is nosuchtest %}{% endif %}{{ 1 is nosuch }}", "{\"a\":1}",
                "no test named 'nosuch");
    CHECK_FAILS("ok\n  {{ raise_exception('bad role') }}", NULL, "line 2, column 6: bad role");
    CHECK_FAILS("{% frobnicate %}", NULL, "line 1, column 4: encountered unknown tag 'frobnicate'");
    CHECK_FAILS("{{ 'unterminated }}", NULL, "unterminated string");
    CHECK_FAILS("{{ (1 }}", NULL, "line 1");
    CHECK_FAILS("{# never closed", NULL, "missing end of comment");
    return 0;
}

static int test_unknown_filter_under_if_is_lazy(void)
{
    /* jinja2 defers the check inside if statements and inline ifs */
    CHECK_RENDER("{% if false %}{{ x | nosuch }}{% endif %}ok", NULL, "ok");
    CHECK_RENDER("{{ (x | nosuch) if false else 'ok' }}", NULL, "ok");
    CHECK_FAILS("{% if true %}{{ x | nosuch }}{% endif %}", NULL, "no filter named 'nosuch'");
    CHECK_FAILS("{% if false %}{% for i in x %}{{ i | nosuch }}{% endfor %}{% endif %}", NULL,
                "no filter named");
    return 0;
}

static int test_sandbox_refusals(void)
{
    CHECK_RENDER("{{ 'f' if [].append else 't' }}", NULL, "t");
    CHECK_FAILS("{% set l = [] %}{{ l.append(1) }}", NULL, "unsafe");
    CHECK_FAILS("{% set d = {} %}{{ d.update({}) }}", NULL, "unsafe");
    CHECK_FAILS("{% set ns = namespace() %}{% set ns._x = 1 %}", NULL, "underscore");
    CHECK_FAILS("{% set d = {} %}{% set d.x = 1 %}", NULL, "non-namespace");
    CHECK_FAILS("{{ range(200000) | length }}", NULL, "range too big");
    return 0;
}

static int test_deep_recursion_is_an_error(void)
{
    CHECK_FAILS("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "nested deeper");
    /* 300 nested parentheses: a compile error, not a stack overflow */
    char tpl[1024];
    size_t k = 0;
    k += (size_t)snprintf(tpl + k, sizeof tpl - k, "{{ ");
    for (int i = 0; i < 300; i++) tpl[k++] = '(';
    tpl[k++] = '1';
    for (int i = 0; i < 300; i++) tpl[k++] = ')';
    snprintf(tpl + k, sizeof tpl - k, " }}");
    CHECK_FAILS(tpl, NULL, "nested too deeply");
    /* a template-built structure nested deeper than the limit cannot be printed */
    CHECK_FAILS("{% set ns = namespace(v=[]) %}{% for i in range(1500) %}{% set ns.v = [ns.v] %}"
                "{% endfor %}{{ ns.v }}",
                NULL, "nested too deeply");
    return 0;
}

static int test_huge_work_is_an_error_not_a_hang(void)
{
    hx_template_limits lim = hx_template_limits_default();
    lim.max_steps = 1000000;
    hx_err err = {0};
    char *out = render_lim("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}"
                           "{% endfor %}",
                           NULL, &lim, &err);
    CHECK(out == NULL);
    CHECK_CONTAINS(err.msg, "steps");
    /* cheap-looking operations on big data are charged by size: no quadratic hang */
    lim.max_steps = 20000000;
    memset(&err, 0, sizeof err);
    out = render_lim("{% set s = 'a' * 1000000 %}{% for i in range(100000) %}{{ 'b' in s }}"
                     "{{ s.count('b') }}{% endfor %}",
                     NULL, &lim, &err);
    CHECK(out == NULL);
    CHECK_CONTAINS(err.msg, "steps");
    lim = hx_template_limits_default();
    lim.max_output_bytes = 1000;
    memset(&err, 0, sizeof err);
    out = render_lim("{% for a in range(1000) %}xxxxxxxxxx{% endfor %}", NULL, &lim, &err);
    CHECK(out == NULL);
    CHECK_CONTAINS(err.msg, "longer than");
    lim = hx_template_limits_default();
    lim.max_memory_bytes = 4 << 20;
    memset(&err, 0, sizeof err);
    out = render_lim("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                     "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
                     NULL, &lim, &err);
    CHECK(out == NULL);
    CHECK(err.msg[0] != '\0');
    return 0;
}

static int test_chat_context_as_transformers(void)
{
    json_t *req = json_loads("{\"messages\":[{\"role\":\"assistant\",\"content\":\"c\","
                             "\"reasoning\":\"r\"},{\"role\":\"user\",\"content\":\"u\"}]}",
                             0, NULL);
    json_t *ctx = NULL;
    hx_err err = {0};
    CHECK(req != NULL);
    CHECK_EQ(hx_template_chat_context(req, &ctx, &err), HX_OK);
    char *s = json_dumps(ctx, JSON_PRESERVE_ORDER | JSON_COMPACT);
    CHECK_STR(s, "{\"messages\":[{\"thinking\":\"r\",\"role\":\"assistant\",\"content\":\"c\","
                 "\"reasoning\":\"r\",\"reasoning_content\":\"r\"},{\"role\":\"user\","
                 "\"content\":\"u\"}],\"tools\":null,\"documents\":null,"
                 "\"add_generation_prompt\":false}");
    free(s);
    json_decref(ctx);
    json_decref(req);
    return 0;
}

static int test_strftime_now_and_globals(void)
{
    hx_err err = {0};
    char *out = render("{{ strftime_now('%Y') | int > 2000 }}{{ dict(a=1) }}"
                       "{{ range(2, 8, 3) | list }}"
                       "{{ namespace(x=1).x }}",
                       NULL, &err);
    CHECK(out != NULL);
    CHECK_STR(out, "True{'a': 1}[2, 5]1");
    hx_free(out);
    return 0;
}

static const char *medium_template =
    "{%- set ns = namespace(sys='') -%}\n"
    "{%- macro show(m, i=0) -%}<{{ m.role }}:{{ i }}>{{ m.content | trim }}{%- endmacro -%}\n"
    "{%- for m in messages -%}\n"
    "  {%- if m.role == 'system' %}{% set ns.sys = m.content %}{% continue %}{% endif -%}\n"
    "  {{ show(m, loop.index) }}{% if m.tool_calls is defined %}"
    "{{ m.tool_calls | tojson(indent=1) }}"
    "{% endif %}\n"
    "{%- endfor -%}\n"
    "{{ ns.sys | upper }}{{ tools | map(attribute='name') | join(',') if tools }}"
    "{{ (messages | selectattr('role', 'eq', 'user') | list | length) ~ ' users' }}";
static const char *medium_ctx =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"sys\"},{\"role\":\"user\","
    "\"content\":\" hi \"},{\"role\":\"assistant\",\"content\":\"ok\",\"tool_calls\":"
    "[{\"name\":\"f\",\"arguments\":{\"x\":[1,2.5,\"\\u00e9\"]}}]}],\"tools\":[{\"name\":\"f\"},"
    "{\"name\":\"g\"}]}";

static int test_fault_injection_never_crashes_or_leaks(void)
{
    size_t start = hx_alloc_live_bytes();
    json_t *ctx = json_loads(medium_ctx, 0, NULL);
    CHECK(ctx != NULL);
    /* the reference output */
    hx_template *t = NULL;
    hx_err err = {0};
    char *want = NULL;
    CHECK_EQ(hx_template_compile(medium_template, strlen(medium_template), &t, &err), HX_OK);
    CHECK_EQ(hx_template_render(t, ctx, &want, NULL, &err), HX_OK);
    hx_template_free(t);
    int successes = 0;
    for (int64_t k = 0; k < 400; k++) {
        hx_template *tk = NULL;
        char *out = NULL;
        hx_err e = {0};
        hx_alloc_fail_after(k);
        hx_status st = hx_template_compile(medium_template, strlen(medium_template), &tk, &e);
        if (st == HX_OK) st = hx_template_render(tk, ctx, &out, NULL, &e);
        hx_alloc_fail_after(-1);
        if (st == HX_OK) {
            CHECK_STR(out, want);
            successes++;
        } else {
            CHECK(out == NULL);
            CHECK(e.msg[0] != '\0');
        }
        hx_free(out);
        hx_template_free(tk);
        if (successes > 3) break;
    }
    CHECK(successes > 0);
    hx_free(want);
    json_decref(ctx);
    CHECK_EQ(hx_alloc_live_bytes(), start);
    return 0;
}

typedef struct {
    const hx_template *t;
    json_t            *ctx;
    const char        *want;
    int                bad;
} thread_job;

static void *render_many(void *arg)
{
    thread_job *j = arg;
    for (int i = 0; i < 50; i++) {
        char *out = NULL;
        hx_err e = {0};
        if (hx_template_render(j->t, j->ctx, &out, NULL, &e) != HX_OK || strcmp(out, j->want)) {
            fprintf(stderr, "concurrent render: %s\n%s\n", e.msg, out ? out : "(null)");
            j->bad++;
        }
        hx_free(out);
    }
    return NULL;
}

static int test_concurrent_renders_share_one_template(void)
{
    hx_template *t = NULL;
    hx_err err = {0};
    char *want = NULL;
    json_t *ctx = json_loads(medium_ctx, 0, NULL);
    CHECK_EQ(hx_template_compile(medium_template, strlen(medium_template), &t, &err), HX_OK);
    CHECK_EQ(hx_template_render(t, ctx, &want, NULL, &err), HX_OK);
    pthread_t th[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){t, ctx, want, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, render_many, &jobs[i]), 0);
    }
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += jobs[i].bad;
    }
    CHECK_EQ(bad, 0);
    hx_free(want);
    hx_template_free(t);
    json_decref(ctx);
    return 0;
}

static int test_real_templates_compile(void)
{
    const char *data = check_shared_data();
    if (!data) return 0;
    char list[4096];
    snprintf(list, sizeof list, "%s/templates/SOURCES.md", data);
    FILE *probe = fopen(list, "rb");
    if (!probe) {
        printf("skip: no templates under %s\n", data);
        return 0;
    }
    fclose(probe);
    /* a few templates exercising macros, namespaces, tojson and loop controls */
    static const char *names[] = {"qwen3-0.6b.jinja", "gpt-oss-120b.jinja",
                                  "llama-3.2-3b-instruct.jinja", "gemma-3-1b-it.jinja",
                                  "mistral-small-3.2-24b-instruct-2506.jinja"};
    json_t *ctx = json_loads("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                             "\"add_generation_prompt\":true,\"tools\":null,"
                             "\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}",
                             0, NULL);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/templates/%s", data, names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        static char src[1 << 16];
        size_t n = fread(src, 1, sizeof src - 1, f);
        fclose(f);
        src[n] = '\0';
        hx_template *t = NULL;
        hx_err err = {0};
        char *out = NULL;
        if (hx_template_compile(src, n, &t, &err) != HX_OK) CHECK_FAIL("%s: %s", names[i], err.msg);
        if (hx_template_render(t, ctx, &out, NULL, &err) != HX_OK)
            CHECK_FAIL("%s: %s", names[i], err.msg);
        CHECK_CONTAINS(out, "hi");
        hx_free(out);
        hx_template_free(t);
    }
    json_decref(ctx);
    return 0;
}

static const check_case cases[] = {
    { "whitespace_control_minus_and_plus", test_whitespace_control_minus_and_plus },
    { "trim_and_lstrip_blocks_as_transformers", test_trim_and_lstrip_blocks_as_transformers },
    { "newlines_normalised_trailing_dropped", test_newlines_normalised_trailing_dropped },
    { "raw_block_is_verbatim", test_raw_block_is_verbatim },
    { "loop_variables", test_loop_variables },
    { "loop_else_filter_and_unpacking", test_loop_else_filter_and_unpacking },
    { "loop_controls", test_loop_controls },
    { "scoping_matches_jinja2", test_scoping_matches_jinja2 },
    { "set_block_filter_block_and_generation", test_set_block_filter_block_and_generation },
    { "macros_defaults_kwargs_varargs_caller", test_macros_defaults_kwargs_varargs_caller },
    { "python_value_printing", test_python_value_printing },
    { "tojson_as_transformers", test_tojson_as_transformers },
    { "filters", test_filters },
    { "tests", test_tests },
    { "string_and_dict_methods", test_string_and_dict_methods },
    { "undefined_semantics", test_undefined_semantics },
    { "markup_escapes_when_mixed", test_markup_escapes_when_mixed },
    { "operators", test_operators },
    { "string_literal_escapes", test_string_literal_escapes },
    { "errors_carry_line_and_column", test_errors_carry_line_and_column },
    { "unknown_filter_under_if_is_lazy", test_unknown_filter_under_if_is_lazy },
    { "sandbox_refusals", test_sandbox_refusals },
    { "deep_recursion_is_an_error", test_deep_recursion_is_an_error },
    { "huge_work_is_an_error_not_a_hang", test_huge_work_is_an_error_not_a_hang },
    { "chat_context_as_transformers", test_chat_context_as_transformers },
    { "strftime_now_and_globals", test_strftime_now_and_globals },
    { "fault_injection_never_crashes_or_leaks", test_fault_injection_never_crashes_or_leaks },
    { "concurrent_renders_share_one_template", test_concurrent_renders_share_one_template },
    { "real_templates_compile", test_real_templates_compile },
};
CHECK_MAIN(cases)
