/* test_regex.c - regex to grammar: the grammar accepts exactly what POSIX regexec accepts for an
 * equivalent extended regex, over every short string of a small alphabet; JSON-string mode
 * (escapes, search semantics); errors name the feature and offset; allocation failures. */
#define _POSIX_C_SOURCE 200809L
#include <regex.h>

#include "base/alloc.h"
#include "check.h"
#include "sample/grammar.h"
#include "sample/regex.h"

/* ---- helpers ---- */

/* Compiles re (and, in JSON mode, wraps it in quotes as a string rule). */
static hx_grammar *compile_re(const char *re, unsigned flags)
{
    char *text = NULL;
    hx_err err = { 0 };
    const char *rule = flags & HX_REGEX_JSON_STRING ? "p" : "root";
    if (hx_regex_to_grammar(re, strlen(re), rule, flags, &text, &err) != HX_OK) {
        fprintf(stderr, "regex %s failed: %s\n", re, err.msg);
        return NULL;
    }
    char full[8192];
    snprintf(full, sizeof full, "%s%s", text,
             flags & HX_REGEX_JSON_STRING ? "root ::= \"\\\"\" p \"\\\"\"\n" : "");
    hx_free(text);
    hx_grammar *g = NULL;
    if (hx_grammar_compile(full, strlen(full), &g, &err) != HX_OK)
        fprintf(stderr, "grammar for %s failed: %s\n%s", re, err.msg, full);
    return g;
}

static bool accepts(const hx_grammar *g, const char *s, size_t n)
{
    hx_grammar_state *st = hx_grammar_start(g);
    const bool ok = st && hx_grammar_accept_bytes(st, s, n) && hx_grammar_done(st);
    hx_grammar_state_free(st);
    return ok;
}

static bool accepts_str(const hx_grammar *g, const char *s)
{
    return accepts(g, s, strlen(s));
}

/* s as a JSON string literal, escaped the way the grammar writes escapes. */
static size_t json_quote(const char *s, size_t n, char *out)
{
    size_t k = 0;
    out[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') out[k++] = '\\', out[k++] = (char)c;
        else if (c == '\n') out[k++] = '\\', out[k++] = 'n';
        else if (c == '\t') out[k++] = '\\', out[k++] = 't';
        else if (c < 0x20) k += (size_t)sprintf(out + k, "\\u%04x", c);
        else out[k++] = (char)c;
    }
    out[k++] = '"';
    out[k] = '\0';
    return k;
}

/* Every string over alphabet up to max_len: the grammar of re accepts it exactly when the POSIX
 * extended regex ere matches it (whole, or searched in JSON mode where ere carries its own
 * anchors). */
static int check_against_posix(const char *re, const char *ere, unsigned flags,
                               const char *alphabet, int max_len)
{
    hx_grammar *g = compile_re(re, flags);
    CHECK(g != NULL);
    const bool json = flags & HX_REGEX_JSON_STRING;
    char anchored[512];
    snprintf(anchored, sizeof anchored, json ? "%s" : "^(%s)$", ere);
    regex_t posix;
    CHECK_EQ(regcomp(&posix, anchored, REG_EXTENDED | REG_NOSUB), 0);
    const int k = (int)strlen(alphabet);
    int idx[16] = { 0 };
    int checked = 0;
    for (int len = 0; len <= max_len; len++) {
        memset(idx, 0, sizeof idx);
        for (;;) {
            char s[16], q[128];
            for (int i = 0; i < len; i++) s[i] = alphabet[idx[i]];
            s[len] = '\0';
            const bool want = regexec(&posix, s, 0, NULL, 0) == 0;
            const bool got = json ? accepts(g, q, json_quote(s, (size_t)len, q))
                                  : accepts(g, s, (size_t)len);
            if (want != got) {
                regfree(&posix);
                hx_grammar_free(g);
                CHECK_FAIL("regex %s on \"%s\": grammar %s, POSIX %s", re, s,
                           got ? "accepts" : "rejects", want ? "matches" : "does not match");
            }
            checked++;
            int i = len - 1; /* next string of this length */
            while (i >= 0 && ++idx[i] == k) idx[i--] = 0;
            if (i < 0) break;
        }
    }
    regfree(&posix);
    hx_grammar_free(g);
    CHECK(checked > 0);
    return 0;
}

/* ---- cases ---- */

static int test_whole_match_agrees_with_posix_on_every_short_string(void)
{
    static const struct {
        const char *re, *ere;
    } pairs[] = {
        { "abc", "abc" },
        { "a*b+", "a*b+" },
        { "(ab|1)*_?", "(ab|1)*_?" },
        { "[a-b1]{2,3}", "[a-b1]{2,3}" },
        { "[^a ]+", "[^a ]+" },
        { ".+", "[^\n\r]+" },
        { "\\d\\w?", "[0-9][0-9A-Za-z_]?" },
        { "\\s+a", "[ \t\n\v\f\r]+a" },
        { "\\S\\S", "[^ \t\n\v\f\r]{2}" },
        { "\\W*1", "[^0-9A-Za-z_]*1" },
        { "[\\d_]+a", "[0-9_]+a" },
        { "[^\\da]", "[^0-9a]" },
        { "[\\sa]b", "[ \t\n\v\f\ra]b" },
        { "^a(?:b|_)?1$", "a(b|_)?1" },
        { "^a|b$|^1$", "a|b|1" },
        { "(?P<x>a)(?<y>b)?", "(a)(b)?" },
        { "a{2}|b{1,}|1{,2}", "a{2}|b{1,}|1{0,2}" },
        { "a+?b??_*?", "a+b?_*" },
        { "\\x61\\u0062", "ab" },
        { "[\\-a]+", "[-a]+" },
        { "[]a]", "[]a]" },
        { "a{0}b", "b" },
        { "((a|b)1)+", "((a|b)1)+" },
        { "(a|)b", "(a|1{0})b" },
        { "\\_a\\ ", "_a " },
        { "[\\n ]a", "[\n ]a" },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (check_against_posix(pairs[i].re, pairs[i].ere, 0, "ab19_ \n\r", 4)) return 1;
    return 0;
}

static int test_empty_regex_and_literal_braces(void)
{
    hx_grammar *g = compile_re("", 0);
    CHECK(g != NULL);
    CHECK(accepts_str(g, ""));
    CHECK(!accepts_str(g, "a"));
    hx_grammar_free(g);
    CHECK(check_against_posix("a{x}|b{", "a\\{x\\}|b\\{", 0, "ab{}x", 4) == 0);
    CHECK(check_against_posix("a{1,2", "a\\{1,2", 0, "a{1,2", 6) == 0);
    return 0;
}

static int test_json_string_mode_escapes_and_searches(void)
{
    static const struct {
        const char *re, *ere;
    } pairs[] = {
        { "b", "b" },
        { "^b", "^b" },
        { "b$|^a", "b$|^a" },
        { "^[^a]+$", "^[^a]+$" },
        { "^a\"?b$", "^a\"?b$" },
        { "\\\\", "\\\\" },
        { "^\\s.$", "^[ \t\n\v\f\r][^\n\r]$" },
        { "^.*$", "^[^\n\r]*$" },
        { "^(a|\\n)+$", "^(a|\n)+$" },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (check_against_posix(pairs[i].re, pairs[i].ere, HX_REGEX_JSON_STRING,
                                "ab\"\\\n\t\x01", 4))
            return 1;
    /* The raw characters a JSON string must escape are never accepted. */
    hx_grammar *g = compile_re("^[^a]*$", HX_REGEX_JSON_STRING);
    CHECK(g != NULL);
    CHECK(accepts_str(g, "\"x\\\"\\\\\\n\\u0001\""));
    CHECK(!accepts_str(g, "\"x\"\""));
    CHECK(!accepts_str(g, "\"\n\""));
    CHECK(!accepts_str(g, "\"\\\""));
    hx_grammar_free(g);
    return 0;
}

static int test_unicode_characters_and_classes(void)
{
    hx_grammar *g = compile_re("é+[α-γ]\\S.", 0);
    CHECK(g != NULL);
    CHECK(accepts_str(g, "ééβ€x"));
    CHECK(accepts_str(g, "éγ日本"));
    CHECK(!accepts_str(g, "éδ€x"));          /* outside the range */
    CHECK(!accepts_str(g, "éα\xC2\xA0x"));   /* \S: no-break space is white space */
    CHECK(!accepts_str(g, "éα\xE3\x80\x80x")); /* \S: ideographic space */
    CHECK(!accepts_str(g, "éαx\xE2\x80\xA8")); /* .: line separator */
    CHECK(!accepts_str(g, "éαx\r"));
    hx_grammar_free(g);
    g = compile_re("[^a]\\W\\u00e9\\U0001F600", 0);
    CHECK(g != NULL);
    CHECK(accepts_str(g, "日-é😀"));
    CHECK(!accepts_str(g, "日ü" "é😀")); /* \W is ASCII only: a letter in either dialect */
    CHECK(!accepts_str(g, "a-é😀"));
    hx_grammar_free(g);
    return 0;
}

static int test_errors_name_the_feature_and_offset(void)
{
    char deep[200] = "";
    for (int i = 0; i < 70; i++) strcat(deep, "(");
    strcat(deep, "a");
    for (int i = 0; i < 70; i++) strcat(deep, ")");
    const struct {
        const char *re;
        hx_status   st;
        const char *msg;
    } cases[] = {
        { "(a", HX_E_INVALID, "missing ')' for this group (at offset 0)" },
        { "ab)", HX_E_INVALID, "unbalanced ')' (at offset 2)" },
        { "*a", HX_E_INVALID, "nothing to repeat" },
        { "a|?", HX_E_INVALID, "nothing to repeat (at offset 2)" },
        { "a**", HX_E_INVALID, "multiple repeat" },
        { "a{2}{3}", HX_E_INVALID, "multiple repeat" },
        { "(a)\\1", HX_E_UNSUPPORTED, "backreferences (\\1) are not supported (at offset 3)" },
        { "(?P<n>a)(?P=n)", HX_E_UNSUPPORTED, "backreferences are not supported" },
        { "a(?=b)", HX_E_UNSUPPORTED, "lookaround assertions are not supported" },
        { "(?<!b)a", HX_E_UNSUPPORTED, "lookaround assertions are not supported" },
        { "(?i)a", HX_E_UNSUPPORTED, "inline flags" },
        { "a\\b", HX_E_UNSUPPORTED, "word boundaries (\\b)" },
        { "a^b", HX_E_UNSUPPORTED, "'^' is supported only at the start" },
        { "a$b", HX_E_UNSUPPORTED, "'$' is supported only at the end" },
        { "(a$)", HX_E_UNSUPPORTED, "'$' is supported only at the end" },
        { "a{5000}", HX_E_UNSUPPORTED, "repetition counts above 4096" },
        { "a{3,2}", HX_E_INVALID, "the minimum exceeds the maximum" },
        { "a*+", HX_E_UNSUPPORTED, "possessive quantifiers" },
        { "a{}", HX_E_UNSUPPORTED, "escape the brace" },
        { "[b-a]", HX_E_INVALID, "bad range" },
        { "[\\d-z]", HX_E_INVALID, "cannot start a range" },
        { "[a", HX_E_INVALID, "unterminated character class" },
        { "\\q", HX_E_INVALID, "unknown escape '\\q'" },
        { "a\\", HX_E_INVALID, "may not end with '\\'" },
        { "\\x4", HX_E_INVALID, "expected 2 hex digits" },
        { "\\ud800", HX_E_INVALID, "not a character" },
        { "\\012", HX_E_UNSUPPORTED, "octal escapes" },
        { "(?<>a)", HX_E_INVALID, "bad group name" },
        { "a\xff", HX_E_INVALID, "expected UTF-8 text" },
        { deep, HX_E_UNSUPPORTED, "groups nested deeper than 64" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = NULL;
        hx_err err = { 0 };
        const hx_status st =
            hx_regex_to_grammar(cases[i].re, strlen(cases[i].re), "root", 0, &text, &err);
        if (st != cases[i].st) CHECK_FAIL("%s: status %d, want %d (%s)", cases[i].re, st,
                                          cases[i].st, err.msg);
        CHECK(text == NULL);
        CHECK_CONTAINS(err.msg, "regex: ");
        CHECK_CONTAINS(err.msg, cases[i].msg);
    }
    return 0;
}

static int test_failed_allocations_leave_nothing_behind(void)
{
    static const char re[] = "^(a|[^\\d\"]{2,5})+\\w*?.$|x";
    const size_t live = hx_alloc_live_bytes();
    for (int n = 0; n < 400; n++) {
        char *text = NULL;
        hx_err err = { 0 };
        hx_alloc_fail_after(n);
        const hx_status st = hx_regex_to_grammar(re, strlen(re), "p", HX_REGEX_JSON_STRING,
                                                 &text, &err);
        hx_alloc_fail_after(-1);
        CHECK(st == HX_OK || st == HX_E_NOMEM);
        if (st == HX_OK) CHECK(text != NULL);
        else CHECK_CONTAINS(err.msg, "out of memory");
        hx_free(text);
        CHECK_EQ(hx_alloc_live_bytes(), live);
    }
    return 0;
}

static const check_case cases[] = {
    { "whole_match_agrees_with_posix_on_every_short_string", test_whole_match_agrees_with_posix_on_every_short_string },
    { "empty_regex_and_literal_braces", test_empty_regex_and_literal_braces },
    { "json_string_mode_escapes_and_searches", test_json_string_mode_escapes_and_searches },
    { "unicode_characters_and_classes", test_unicode_characters_and_classes },
    { "errors_name_the_feature_and_offset", test_errors_name_the_feature_and_offset },
    { "failed_allocations_leave_nothing_behind", test_failed_allocations_leave_nothing_behind },
};
CHECK_MAIN(cases)
