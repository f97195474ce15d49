/* tools.c - the tools a chat request offers (tools.h).
 *
 * Normalizing and tool_choice are plain validation. A call grammar is assembled from three kinds
 * of rules: the family's envelope (a table of grammar fragments per family, below), one argument
 * grammar per tool from sample/json_schema.c, and, for QWEN3_CODER, the rules of an unquoted
 * string. json_schema.c writes every grammar as the same block of JSON primitives followed by
 * rules gN and `root`; the primitives are kept once under the prefix "j-" and every other rule of
 * tool I is renamed "tI-...", so any number of tools share one grammar text. The envelope's
 * rules are "tc-...", the unquoted-string rules "x-...". Keyword-list families (QWEN3_CODER,
 * GEMMA, PYTHONIC) get one JSON grammar per declared property, obtained by converting the whole
 * parameters schema with a top-level "$ref" to that property, so the property's own $refs still
 * resolve against the schema's root.
 *
 * Folding writes calls as text in the same markup the grammars accept; tool_choice, folding and
 * prompts never change their inputs. */
#include "serve/tools.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "sample/json_schema.h"

/* ---- text buffer ---- */

/* A growing NUL-terminated string. An allocation failure is sticky: later appends do nothing
 * and the owner checks oom once at the end. */
typedef struct {
    char  *data;
    size_t len, cap;
    bool   oom;
} tbuf;

static void tb_put(tbuf *b, const char *s, size_t n)
{
    if (b->oom || n >= SIZE_MAX / 2 - b->len) { /* the bound also tells the compiler n is sane */
        b->oom = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = hx_realloc(b->data, cap);
        if (!d) {
            b->oom = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void tb_str(tbuf *b, const char *s)
{
    tb_put(b, s, strlen(s));
}

static void tb_printf(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(tbuf *b, const char *fmt, ...)
{
    char    tmp[256];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    HX_ASSERT(n >= 0 && (size_t)n < sizeof tmp); /* only short, fixed-shape pieces come here */
    tb_put(b, tmp, (size_t)n);
}

/* Appends the JSON text of v with the separators chat templates' tojson writes (", ", ": "). */
static void tb_json(tbuf *b, const json_t *v)
{
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!text) {
        b->oom = true;
        return;
    }
    tb_str(b, text);
    free(text); /* jansson's allocator, not ours */
}

/* Appends s[0..n) escaped for the inside of a grammar literal (no quotes added). */
static void tb_lit_body(tbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            tb_put(b, "\\", 1);
            tb_put(b, s + i, 1);
        } else if (c < 0x20 || c == 0x7F) {
            tb_printf(b, "\\x%02X", c);
        } else {
            tb_put(b, s + i, 1);
        }
    }
}

static void tb_free(tbuf *b)
{
    hx_free(b->data);
    b->data = NULL;
}

/* ---- messages ---- */

/* A short description of v for messages: its compact JSON text cut to about 40 bytes, or
 * "nothing" when absent. */
static void describe(const json_t *v, char *dst, size_t cap)
{
    if (!v) {
        snprintf(dst, cap, "nothing");
        return;
    }
    const size_t n = json_dumpb(v, dst, cap - 1, JSON_ENCODE_ANY | JSON_COMPACT);
    if (n < cap)
        dst[n] = '\0';
    else
        memcpy(dst + cap - 4, "...", 4);
}

/* Records a failure of the field at path: param (may be NULL) gets the path, err the message. */
static hx_status fail_at(hx_err *err, char *param, size_t cap, hx_status st, const char *path,
                         const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static hx_status fail_at(hx_err *err, char *param, size_t cap, hx_status st, const char *path,
                         const char *fmt, ...)
{
    char    msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (param && cap > 0) snprintf(param, cap, "%s", path);
    return hx_err_set(err, st, "%s", msg);
}

/* obj[key], or NULL when absent or JSON null. */
static json_t *field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* ---- normalizing ---- */

static bool name_ok(const json_t *v)
{
    const char  *s = json_string_value(v);
    const size_t n = s ? json_string_length(v) : 0;
    if (n == 0 || n > HX_TOOLS_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* The name of normalized tool t, or NULL when t is not in the normalized shape. */
static const char *tool_name(json_t *t)
{
    json_t *fn = json_object_get(t, "function");
    if (!json_is_object(fn) || !json_is_object(json_object_get(fn, "parameters"))) return NULL;
    json_t *name = json_object_get(fn, "name");
    return name_ok(name) ? json_string_value(name) : NULL;
}

static json_t *tool_params(json_t *t)
{
    return json_object_get(json_object_get(t, "function"), "parameters");
}

/* Validates norm_tools as hx_tools_normalize writes them (NULL: no tools). */
static hx_status check_normalized(json_t *norm_tools, hx_err *err)
{
    if (!norm_tools) return HX_OK;
    if (!json_is_array(norm_tools))
        return hx_err_set(
            err, HX_E_INVALID,
            "tools: expected the array hx_tools_normalize writes, found another value");
    for (size_t i = 0; i < json_array_size(norm_tools); i++)
        if (!tool_name(json_array_get(norm_tools, i)))
            return hx_err_set(err, HX_E_INVALID,
                              "tools[%zu]: expected a normalized tool "
                              "{\"type\":\"function\",\"function\":{\"name\",\"parameters\"}}",
                              i);
    return HX_OK;
}

/* Index of the tool called name in normalized tools, or -1. */
static ptrdiff_t find_tool(json_t *norm_tools, const char *name)
{
    for (size_t i = 0; i < json_array_size(norm_tools); i++) {
        const char *n = tool_name(json_array_get(norm_tools, i));
        if (n && strcmp(n, name) == 0) return (ptrdiff_t)i;
    }
    return -1;
}

/* Validates tools[i] (t) and appends its normalized form to out. */
static hx_status normalize_one(json_t *t, size_t i, hx_tools_shape shape, json_t *out, char *param,
                               size_t cap, hx_err *err)
{
    char path[96], got[48];
    snprintf(path, sizeof path, "tools[%zu]", i);
    if (!json_is_object(t)) {
        describe(t, got, sizeof got);
        return fail_at(err, param, cap, HX_E_INVALID, path, "%s must be a tool object, got %s",
                       path, got);
    }
    json_t     *fn = t, *type = field(t, "type");
    const char *params_key = "parameters";
    char        base[48]; /* path of the object holding name, description and parameters */
    snprintf(base, sizeof base, "tools[%zu]", i);
    snprintf(path, sizeof path, "tools[%zu].type", i);
    if (shape == HX_TOOLS_ANTHROPIC) {
        params_key = "input_schema";
        if (type && !json_is_string(type)) {
            describe(type, got, sizeof got);
            return fail_at(err, param, cap, HX_E_INVALID, path, "%s must be a string, got %s", path,
                           got);
        }
        if (type && strcmp(json_string_value(type), "custom") != 0)
            return fail_at(err, param, cap, HX_E_UNSUPPORTED, path,
                           "tools[%zu] is a tool of type '%.64s', which is not supported (only "
                           "custom tools with a name and an input_schema)",
                           i, json_string_value(type));
    } else {
        if (!json_is_string(type)) {
            describe(type, got, sizeof got);
            return fail_at(err, param, cap, HX_E_INVALID, path, "%s must be \"function\", got %s",
                           path, got);
        }
        if (strcmp(json_string_value(type), "function") != 0)
            return fail_at(err, param, cap, HX_E_UNSUPPORTED, path,
                           "%s '%.64s' is not supported (only \"function\" tools)", path,
                           json_string_value(type));
        if (shape == HX_TOOLS_OPENAI_CHAT) {
            fn = field(t, "function");
            snprintf(path, sizeof path, "tools[%zu].function", i);
            if (!json_is_object(fn)) {
                describe(fn, got, sizeof got);
                return fail_at(err, param, cap, HX_E_INVALID, path,
                               "%s must be an object with the function's name, description and "
                               "parameters, got %s",
                               path, got);
            }
            snprintf(base, sizeof base, "tools[%zu].function", i);
        }
    }

    json_t *name = field(fn, "name");
    snprintf(path, sizeof path, "%s.name", base);
    if (!name_ok(name)) {
        describe(name, got, sizeof got);
        return fail_at(err, param, cap, HX_E_INVALID, path,
                       "%s must be a string of letters, digits, '_' or '-' (at most %d), got %s",
                       path, HX_TOOLS_NAME_MAX, got);
    }
    const ptrdiff_t dup = find_tool(out, json_string_value(name));
    if (dup >= 0)
        return fail_at(err, param, cap, HX_E_INVALID, path,
                       "%s '%s' is already the name of tools[%td]; tool names must be unique", path,
                       json_string_value(name), dup);
    json_t *desc = field(fn, "description");
    snprintf(path, sizeof path, "%s.description", base);
    if (desc && !json_is_string(desc)) {
        describe(desc, got, sizeof got);
        return fail_at(err, param, cap, HX_E_INVALID, path, "%s must be a string, got %s", path,
                       got);
    }
    json_t *params = field(fn, params_key);
    snprintf(path, sizeof path, "%s.%s", base, params_key);
    if ((params || shape == HX_TOOLS_ANTHROPIC) && !json_is_object(params)) {
        describe(params, got, sizeof got);
        return fail_at(err, param, cap, HX_E_INVALID, path,
                       "%s must be a JSON Schema object, got %s", path, got);
    }
    json_t *strict = field(fn, "strict");
    snprintf(path, sizeof path, "%s.strict", base);
    if (strict && !json_is_boolean(strict)) {
        describe(strict, got, sizeof got);
        return fail_at(err, param, cap, HX_E_INVALID, path, "%s must be a boolean, got %s", path,
                       got);
    }

    json_t *p =
        params ? json_deep_copy(params) : json_pack("{s:s, s:{}}", "type", "object", "properties");
    json_t *f = json_pack("{s:O, s:s, s:o}", "name", name, "description",
                          desc ? json_string_value(desc) : "", "parameters", p);
    json_t *entry = json_pack("{s:s, s:o}", "type", "function", "function", f);
    if (!entry || json_array_append_new(out, entry) != 0)
        return fail_at(err, param, cap, HX_E_NOMEM, base, "tools: out of memory");
    return HX_OK;
}

hx_status hx_tools_normalize(json_t *tools, hx_tools_shape shape, json_t **out, char *param,
                             size_t param_cap, hx_err *err)
{
    char got[48];
    if ((unsigned)shape >= HX_TOOLS_SHAPE_COUNT)
        return hx_err_set(err, HX_E_INVALID, "tools: unknown request shape %d", (int)shape);
    if (!json_is_array(tools)) {
        describe(tools, got, sizeof got);
        return fail_at(err, param, param_cap, HX_E_INVALID, "tools",
                       "tools must be an array of tool objects, got %s", got);
    }
    json_t *norm = json_array();
    if (!norm) return hx_err_set(err, HX_E_NOMEM, "tools: out of memory");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const hx_status st =
            normalize_one(json_array_get(tools, i), i, shape, norm, param, param_cap, err);
        if (st != HX_OK) {
            json_decref(norm);
            return st;
        }
    }
    *out = norm;
    return HX_OK;
}

/* ---- tool_choice ---- */

hx_status hx_tools_choice(json_t *v, hx_tools_shape shape, json_t *norm_tools, hx_tool_choice *out,
                          char *param, size_t cap, hx_err *err)
{
    hx_tool_choice c = {.kind = HX_TOOL_CHOICE_AUTO};
    char           got[48];
    hx_status      st = check_normalized(norm_tools, err);
    if (st != HX_OK) return st;
    if ((unsigned)shape >= HX_TOOLS_SHAPE_COUNT)
        return hx_err_set(err, HX_E_INVALID, "tool_choice: unknown request shape %d", (int)shape);
    json_t     *name = NULL;
    const char *name_path = "tool_choice.name";
    if (json_is_null(v)) v = NULL;
    if (v && shape == HX_TOOLS_ANTHROPIC) {
        static const char *const         kinds[] = {"auto", "none", "any", "tool"};
        static const hx_tool_choice_kind map[] = {HX_TOOL_CHOICE_AUTO, HX_TOOL_CHOICE_NONE,
                                                  HX_TOOL_CHOICE_REQUIRED, HX_TOOL_CHOICE_NAMED};
        json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
        size_t  k = 0;
        while (k < HX_COUNTOF(kinds) &&
               !(json_is_string(type) && strcmp(json_string_value(type), kinds[k]) == 0))
            k++;
        if (k == HX_COUNTOF(kinds)) {
            describe(json_is_object(v) ? type : v, got, sizeof got);
            return fail_at(err, param, cap, HX_E_INVALID,
                           json_is_object(v) ? "tool_choice.type" : "tool_choice",
                           "tool_choice must be an object with \"type\" \"auto\", \"any\", "
                           "\"tool\" or \"none\", got %s",
                           got);
        }
        c.kind = map[k];
        json_t *dp = field(v, "disable_parallel_tool_use");
        if (dp && !json_is_boolean(dp)) {
            describe(dp, got, sizeof got);
            return fail_at(err, param, cap, HX_E_INVALID, "tool_choice.disable_parallel_tool_use",
                           "tool_choice.disable_parallel_tool_use must be a boolean, got %s", got);
        }
        c.disable_parallel = json_is_true(dp);
        if (c.kind == HX_TOOL_CHOICE_NAMED) name = field(v, "name");
    } else if (json_is_string(v)) {
        static const char *const kinds[] = {"auto", "none", "required"};
        size_t                   k = 0;
        while (k < HX_COUNTOF(kinds) && strcmp(json_string_value(v), kinds[k]) != 0)
            k++;
        if (k == HX_COUNTOF(kinds)) {
            describe(v, got, sizeof got);
            return fail_at(err, param, cap, HX_E_INVALID, "tool_choice",
                           "tool_choice must be \"auto\", \"none\", \"required\" or an object "
                           "naming a function, got %s",
                           got);
        }
        c.kind = k == 0   ? HX_TOOL_CHOICE_AUTO
                 : k == 1 ? HX_TOOL_CHOICE_NONE
                          : HX_TOOL_CHOICE_REQUIRED;
    } else if (v) {
        json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
        if (!json_is_string(type)) {
            describe(v, got, sizeof got);
            return fail_at(err, param, cap, HX_E_INVALID, "tool_choice",
                           "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": "
                           "\"function\", ...}, got %s",
                           got);
        }
        if (strcmp(json_string_value(type), "function") != 0)
            return fail_at(err, param, cap, HX_E_UNSUPPORTED, "tool_choice.type",
                           "tool_choice of type '%.64s' is not supported (only \"function\")",
                           json_string_value(type));
        c.kind = HX_TOOL_CHOICE_NAMED;
        if (shape == HX_TOOLS_OPENAI_CHAT) {
            json_t *fn = field(v, "function");
            name = json_is_object(fn) ? field(fn, "name") : NULL;
            name_path = "tool_choice.function.name";
        } else {
            name = field(v, "name");
        }
    }
    if (c.kind == HX_TOOL_CHOICE_NAMED) {
        if (!json_is_string(name)) {
            describe(name, got, sizeof got);
            return fail_at(err, param, cap, HX_E_INVALID, name_path,
                           "%s must be the name of one of the tools, got %s", name_path, got);
        }
        if (find_tool(norm_tools, json_string_value(name)) < 0)
            return fail_at(err, param, cap, HX_E_INVALID, name_path,
                           "%s '%.64s' is not the name of any of the request's tools", name_path,
                           json_string_value(name));
        snprintf(c.name, sizeof c.name, "%s", json_string_value(name));
    }
    if (c.kind == HX_TOOL_CHOICE_REQUIRED && json_array_size(norm_tools) == 0)
        return fail_at(err, param, cap, HX_E_INVALID, "tool_choice",
                       "tool_choice requires a tool call, but the request offers no tools");
    *out = c;
    return HX_OK;
}

/* ---- call grammars: family envelopes ---- */

/* How one family writes calls, as grammar fragments. In `call`, @N stands for the tool's name
 * and @A for the rule of its arguments; in `kv` (keyword-list families), @K for the argument's
 * name (escaped for a literal) and @V for the rule of its value. */
typedef struct {
    const char *begin; /* before the first call ("" for nothing) */
    const char *call;
    const char *sep; /* between calls */
    const char *end; /* after the last call */
} envelope;

typedef struct {
    envelope    env[2]; /* alternative layouts of the whole reply */
    int         n_env;
    const char *kv;       /* NULL: arguments are one JSON object */
    const char *kv_sep;   /* between keyword arguments */
    bool        unquoted; /* string values are written without quotes (QWEN3_CODER) */
} family_grammar;

#define G_HERMES_CALL                                                                              \
    "\"<tool_call>\" \"\\n\"? \"{\\\"name\\\": \\\"@N\\\", \\\"arguments\\\": \" @A \"}\" "        \
    "\"\\n\"? \"</tool_call>\""
#define G_JSON_CALL "\"{\\\"name\\\": \\\"@N\\\", \\\"arguments\\\": \" @A \"}\""

/* One family per row; the forms are those the family's chat template writes (toolcall.h). */
/* clang-format off */
static const family_grammar family_grammars[HX_TOOLCALL_COUNT] = {
    [HX_TOOLCALL_GENERIC] = {{{"", G_HERMES_CALL, "\"\\n\"?", ""}}, 1, NULL, NULL, false},
    [HX_TOOLCALL_HERMES] = {{{"", G_HERMES_CALL, "\"\\n\"?", ""}}, 1, NULL, NULL, false},
    [HX_TOOLCALL_QWEN3_CODER] = {{{"",
                                   "\"<tool_call>\" \"\\n\"? \"<function=@N>\" \"\\n\"? @A "
                                   "\"</function>\" \"\\n\"? \"</tool_call>\"",
                                   "\"\\n\"?", ""}},
                                 1,
                                 "\"<parameter=@K>\\n\" @V \"\\n</parameter>\" \"\\n\"?",
                                 "",
                                 true},
    [HX_TOOLCALL_LLAMA3] = {{{"", "\"{\\\"name\\\": \\\"@N\\\", \\\"parameters\\\": \" @A \"}\"",
                              "(\";\" \"\\n\"? | \"\\n\")", ""}},
                            1, NULL, NULL, false},
    /* Mistral v0.3 writes a JSON list; Small 3.2 and Devstral one [ARGS] call per marker. */
    [HX_TOOLCALL_MISTRAL] = {{{"\"[TOOL_CALLS]\" \" \"? \"[\"", G_JSON_CALL, "\", \"", "\"]\""},
                             {"", "\"[TOOL_CALLS]@N[ARGS]\" @A", "", ""}},
                            2, NULL, NULL, false},
    [HX_TOOLCALL_GEMMA] = {{{"\"```tool_code\\n\"", "\"@N(\" @A \")\"", "\"\\n\"",
                             "\"\\n```\""}},
                           1, "\"@K=\" @V", "\", \"", false},
    /* V3 names the function after the separator and fences the JSON; V3.1 does neither. */
    [HX_TOOLCALL_DEEPSEEK_V3] = {{{"\"" HX_DS_CALLS_BEGIN "\"",
                                   "\"" HX_DS_CALL_BEGIN "\" (\"function" HX_DS_SEP "@N\\n```json\\n\" "
                                   "@A \"\\n```\" | \"@N" HX_DS_SEP "\" @A) \"" HX_DS_CALL_END "\"",
                                   "\"\\n\"?", "\"" HX_DS_CALLS_END "\""}},
                                 1, NULL, NULL, false},
    [HX_TOOLCALL_PYTHONIC] = {{{"\"[\"", "\"@N(\" @A \")\"", "\", \"", "\"]\""}},
                              1, "\"@K=\" @V", "\", \"", false},
};
/* clang-format on */

/* ---- call grammars: the writer ---- */

typedef struct {
    const char *p;
    size_t      n;
} span;

typedef struct {
    tbuf        out;
    const char *prims;     /* the rules json_schema.c writes first in every grammar */
    size_t      prims_len; /* 0: that block was not recognised; then nothing is shared */
    span        prim_names[64];
    size_t      n_prim_names;
    bool        prims_done; /* the shared "j-" copy is written */
    bool        raw_done;   /* the "x-" rules of unquoted strings are written */
    hx_err     *err;
} gwriter;

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Finds the block of JSON primitives: hx_json_object_grammar() is that block followed by its
 * root rule. Records the names the block defines (one rule per line). */
static void gw_init(gwriter *g, hx_err *err)
{
    memset(g, 0, sizeof *g);
    g->err = err;
    const char  *obj = hx_json_object_grammar(), *tail = "root ::= object\n";
    const size_t n = strlen(obj), k = strlen(tail);
    if (n < k || strcmp(obj + n - k, tail) != 0) return;
    for (size_t i = 0; i < n - k;) {
        size_t j = i;
        while (j < n - k && is_name_char(obj[j]))
            j++;
        size_t q = j;
        while (q < n - k && obj[q] == ' ')
            q++;
        if (j > i && strncmp(obj + q, "::=", 3) == 0) {
            if (g->n_prim_names == HX_COUNTOF(g->prim_names)) {
                g->n_prim_names = 0; /* more than expected: share nothing */
                return;
            }
            g->prim_names[g->n_prim_names++] = (span){obj + i, j - i};
        }
        while (i < n - k && obj[i] != '\n')
            i++;
        i++;
    }
    g->prims = obj;
    g->prims_len = n - k;
}

static bool is_prim(const gwriter *g, const char *s, size_t n)
{
    for (size_t i = 0; i < g->n_prim_names; i++)
        if (g->prim_names[i].n == n && memcmp(g->prim_names[i].p, s, n) == 0) return true;
    return false;
}

/* Appends grammar text s[0..n) with every rule name renamed: the shared primitives (when shared)
 * to "j-" + name, every other name to prefix + name. Literals, classes, repetition counts and
 * comments are copied as they are. */
static void gw_renamed(gwriter *g, const char *s, size_t n, const char *prefix, bool shared)
{
    for (size_t i = 0; i < n;) {
        const char c = s[i];
        size_t     j = i + 1;
        if (c == '"' || c == '[') {
            const char close = c == '"' ? '"' : ']';
            while (j < n && s[j] != close)
                j += s[j] == '\\' ? 2 : 1;
            j = j < n ? j + 1 : n;
        } else if (c == '#' || c == '{') {
            const char close = c == '#' ? '\n' : '}';
            while (j < n && s[j] != close)
                j++;
            j = j < n ? j + 1 : n;
        } else if (is_name_char(c)) {
            while (j < n && is_name_char(s[j]))
                j++;
            tb_str(&g->out, shared && is_prim(g, s + i, j - i) ? "j-" : prefix);
        }
        tb_put(&g->out, s + i, j - i);
        i = j;
    }
}

/* Converts schema to grammar rules named prefix + "root" etc. what names the schema in messages
 * (" parameters" or " parameter 'x'"). */
static hx_status gw_schema(gwriter *g, json_t *schema, const char *prefix, const char *tool,
                           const char *what)
{
    char           *text = NULL;
    hx_err          e = {0};
    const hx_status st = hx_json_schema_to_grammar(schema, &text, &e);
    if (st != HX_OK) return hx_err_set(g->err, st, "tool '%s'%s: %s", tool, what, e.msg);
    const size_t n = strlen(text);
    if (g->prims_len > 0 && n >= g->prims_len && memcmp(text, g->prims, g->prims_len) == 0) {
        if (!g->prims_done) gw_renamed(g, g->prims, g->prims_len, "j-", true);
        g->prims_done = true;
        gw_renamed(g, text + g->prims_len, n - g->prims_len, prefix, true);
    } else {
        gw_renamed(g, text, n, prefix, false);
    }
    hx_free(text);
    return HX_OK;
}

/* Appends template t with @X replaced: @N and @K by the escaped literal text of nk, @A and @V by
 * the rule name av. */
static void gw_subst(gwriter *g, const char *t, const char *nk, const char *av)
{
    for (; *t; t++) {
        if (t[0] == '@' && (t[1] == 'N' || t[1] == 'K')) {
            tb_lit_body(&g->out, nk, strlen(nk));
            t++;
        } else if (t[0] == '@' && (t[1] == 'A' || t[1] == 'V')) {
            tb_str(&g->out, av);
            t++;
        } else {
            tb_put(&g->out, t, 1);
        }
    }
}

/* ---- call grammars: unquoted strings (QWEN3_CODER) ---- */

/* The parser reads a parameter's text up to the first "</parameter>", and takes it as JSON when
 * it reads as a JSON value other than a string. So an unquoted string value (x-raw) is text that
 * never contains that marker (the x-npK rules: K characters of it matched so far) and is not a
 * JSON number, true, false or null; it may not start with whitespace, '{' or '[' (a JSON object
 * or array cannot be told apart by a grammar). Every rule below may end except where the text
 * read so far is a complete JSON value (x-tail and the accepting number states). */
#define RAW_MARKER "</parameter>"

/* Appends alternatives for "any character in [^excl], then free text": the marker's first
 * character moves to x-np1. */
static void raw_free(gwriter *g, const char *excl)
{
    tb_printf(&g->out, " | [^%s<] x-np0 | \"<\" x-np1", excl);
}

static void gw_raw_rules(gwriter *g)
{
    if (g->raw_done) return;
    g->raw_done = true;
    tbuf *b = &g->out;
    tb_str(b, "x-raw ::= | [^\\-0-9{\\[tfn \\t\\n\\r<] x-np0 | \"<\" x-np1 | \"t\" x-true1 | "
              "\"f\" x-false1 | \"n\" x-null1 | \"-\" x-num1 | \"0\" x-num2 | [1-9] x-num3\n");
    const size_t m = strlen(RAW_MARKER);
    tb_str(b, "x-np0 ::= | [^<] x-np0 | \"<\" x-np1\n");
    for (size_t k = 1; k < m; k++) {
        tb_printf(b, "x-np%zu ::= | \"<\" x-np1 | [^<%c] x-np0", k, RAW_MARKER[k]);
        if (k + 1 < m) tb_printf(b, " | \"%c\" x-np%zu", RAW_MARKER[k], k + 1);
        tb_str(b, "\n"); /* the marker's last character has no way forward */
    }
    static const char *const words[] = {"true", "false", "null"};
    for (size_t w = 0; w < HX_COUNTOF(words); w++) {
        const char *word = words[w];
        for (size_t k = 1; word[k]; k++) {
            tb_printf(b, "x-%s%zu ::= | ", word, k);
            if (word[k + 1])
                tb_printf(b, "\"%c\" x-%s%zu", word[k], word, k + 1);
            else
                tb_printf(b, "\"%c\" x-tail", word[k]);
            char excl[2] = {word[k], '\0'};
            raw_free(g, excl);
            tb_str(b, "\n");
        }
    }
    /* A complete JSON value, then only whitespace so far: something else must follow. */
    tb_str(b, "x-tail ::= [ \\t\\n\\r] x-tail");
    raw_free(g, " \\t\\n\\r");
    /* JSON numbers (jansson's grammar): 1 after '-', 2 after a leading 0, 3 in the integer
     * part, 4 after '.', 5 in the fraction, 6 after 'e', 7 after its sign, 8 in the exponent. */
    tb_str(b, "\nx-num1 ::= | \"0\" x-num2 | [1-9] x-num3");
    raw_free(g, "0-9");
    tb_str(b, "\nx-num2 ::= \".\" x-num4 | [eE] x-num6 | [ \\t\\n\\r] x-tail");
    raw_free(g, ".eE \\t\\n\\r");
    tb_str(b, "\nx-num3 ::= [0-9] x-num3 | \".\" x-num4 | [eE] x-num6 | [ \\t\\n\\r] x-tail");
    raw_free(g, "0-9.eE \\t\\n\\r");
    tb_str(b, "\nx-num4 ::= | [0-9] x-num5");
    raw_free(g, "0-9");
    tb_str(b, "\nx-num5 ::= [0-9] x-num5 | [eE] x-num6 | [ \\t\\n\\r] x-tail");
    raw_free(g, "0-9eE \\t\\n\\r");
    tb_str(b, "\nx-num6 ::= | [\\-+] x-num7 | [0-9] x-num8");
    raw_free(g, "\\-+0-9");
    tb_str(b, "\nx-num7 ::= | [0-9] x-num8");
    raw_free(g, "0-9");
    tb_str(b, "\nx-num8 ::= [0-9] x-num8 | [ \\t\\n\\r] x-tail");
    raw_free(g, "0-9 \\t\\n\\r");
    tb_str(b, "\n");
}

/* Whether the parser reads text s, written unquoted, back as the string s. */
static bool raw_safe(const char *s, size_t n)
{
    for (size_t i = 0; i + strlen(RAW_MARKER) <= n; i++)
        if (memcmp(s + i, RAW_MARKER, strlen(RAW_MARKER)) == 0) return false;
    json_t    *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    const bool ok = !v || json_is_string(v);
    json_decref(v);
    return ok;
}

/* Follows local "$ref" pointers ("#/a/b", ~0 and ~1 unescaped) from s through root, at most a
 * few hops; NULL when one does not resolve. */
static json_t *resolve(json_t *root, json_t *s)
{
    for (int hop = 0; hop < 16; hop++) {
        const char *ref = json_string_value(json_object_get(s, "$ref"));
        if (!ref) return s;
        if (ref[0] != '#') return NULL;
        json_t *at = root;
        for (const char *p = ref + 1; at && *p == '/';) {
            char   seg[256];
            size_t n = 0;
            for (p++; *p && *p != '/' && n + 1 < sizeof seg; p++) {
                if (p[0] == '~' && (p[1] == '0' || p[1] == '1'))
                    seg[n++] = p[1] == '1' ? '/' : '~', p++;
                else
                    seg[n++] = *p;
            }
            seg[n] = '\0';
            if (json_is_array(at))
                at = json_array_get(at, strtoul(seg, NULL, 10));
            else
                at = json_object_get(at, seg);
        }
        s = at;
    }
    return NULL;
}

typedef enum {
    VK_NEVER_STRING, /* never a string: write it as JSON */
    VK_STRING,       /* any string */
    VK_STRING_ENUM,  /* one of the strings listed in const or enum */
    VK_STRING_RULED, /* a string with format, length or pattern rules */
    VK_MIXED,        /* maybe a string, maybe not */
} value_kind;

/* What values schema s (within root) admits, judged by the keyword json_schema.c obeys first. */
static value_kind kind_of(json_t *root, json_t *s, int depth)
{
    json_t *x;
    s = resolve(root, s);
    if (!json_is_object(s) || depth > 16) return VK_MIXED;
    if ((x = json_object_get(s, "const")))
        return json_is_string(x) ? VK_STRING_ENUM : VK_NEVER_STRING;
    if ((x = json_object_get(s, "enum"))) {
        size_t n_str = 0;
        for (size_t i = 0; i < json_array_size(x); i++)
            n_str += json_is_string(json_array_get(x, i));
        return n_str == 0                    ? VK_NEVER_STRING
               : n_str == json_array_size(x) ? VK_STRING_ENUM
                                             : VK_MIXED;
    }
    if ((x = json_object_get(s, "anyOf")) || (x = json_object_get(s, "oneOf"))) {
        for (size_t i = 0; i < json_array_size(x); i++)
            if (kind_of(root, json_array_get(x, i), depth + 1) != VK_NEVER_STRING) return VK_MIXED;
        return VK_NEVER_STRING;
    }
    const bool ruled = json_object_get(s, "format") || json_object_get(s, "minLength") ||
                       json_object_get(s, "maxLength") || json_object_get(s, "pattern");
    if ((x = json_object_get(s, "type"))) {
        if (json_is_string(x))
            return strcmp(json_string_value(x), "string") != 0 ? VK_NEVER_STRING
                   : ruled                                     ? VK_STRING_RULED
                                                               : VK_STRING;
        for (size_t i = 0; i < json_array_size(x); i++)
            if (json_is_string(json_array_get(x, i)) &&
                strcmp(json_string_value(json_array_get(x, i)), "string") == 0)
                return VK_MIXED;
        return VK_NEVER_STRING;
    }
    if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
        json_object_get(s, "items") || json_object_get(s, "minItems") ||
        json_object_get(s, "maxItems"))
        return VK_NEVER_STRING;
    return ruled ? VK_STRING_RULED : VK_MIXED;
}

/* ---- call grammars: keyword-list arguments ---- */

static bool key_ok(const char *key, bool unquoted)
{
    const size_t n = strlen(key);
    if (n == 0 || n > 200) return false;
    for (size_t i = 0; i < n; i++) {
        const char c = key[i];
        if (unquoted ? c == '>'
                     : !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* The rule tI-vK of one keyword argument's value. */
static hx_status kv_value(gwriter *g, const family_grammar *fg, const char *fam, size_t ti,
                          size_t k, const char *tool, json_t *params, const char *key,
                          json_t *schema)
{
    const value_kind vk = fg->unquoted ? kind_of(params, schema, 0) : VK_NEVER_STRING;
    if (vk == VK_STRING) {
        gw_raw_rules(g);
        tb_printf(&g->out, "t%zu-v%zu ::= x-raw\n", ti, k);
        return HX_OK;
    }
    if (vk == VK_STRING_RULED)
        return hx_err_set(g->err, HX_E_UNSUPPORTED,
                          "tool '%s' parameter '%.64s': 'format', 'minLength', 'maxLength' and "
                          "'pattern' cannot be enforced on a string written unquoted, as the %s "
                          "call format writes strings",
                          tool, key, fam);
    if (vk == VK_MIXED)
        return hx_err_set(g->err, HX_E_UNSUPPORTED,
                          "tool '%s' parameter '%.64s' may be a string or another type, which the "
                          "%s call format cannot tell apart (it writes strings unquoted)",
                          tool, key, fam);
    if (vk == VK_STRING_ENUM) {
        json_t *s = resolve(params, schema), *c = json_object_get(s, "const");
        json_t *list = c ? NULL : json_object_get(s, "enum");
        tb_printf(&g->out, "t%zu-v%zu ::= ", ti, k);
        for (size_t i = 0; i < (c ? 1 : json_array_size(list)); i++) {
            json_t *v = c ? c : json_array_get(list, i);
            if (!raw_safe(json_string_value(v), json_string_length(v)))
                return hx_err_set(g->err, HX_E_UNSUPPORTED,
                                  "tool '%s' parameter '%.64s': the value \"%.64s\" would not read "
                                  "back as a string when written unquoted, as the %s call format "
                                  "writes strings",
                                  tool, key, json_string_value(v), fam);
            tb_str(&g->out, i ? " | \"" : "\"");
            tb_lit_body(&g->out, json_string_value(v), json_string_length(v));
            tb_str(&g->out, "\"");
        }
        tb_str(&g->out, "\n");
        return HX_OK;
    }
    /* The whole schema with a top-level $ref to the property: its $refs resolve as before. */
    tbuf ref = {0};
    tb_str(&ref, "#/properties/");
    for (const char *p = key; *p; p++) { /* a JSON pointer segment: ~ and / escaped */
        if (*p == '~' || *p == '/')
            tb_str(&ref, *p == '~' ? "~0" : "~1");
        else
            tb_put(&ref, p, 1);
    }
    json_t   *wrap = json_copy(params);
    hx_status st = HX_E_NOMEM;
    if (!ref.oom && wrap && json_object_set_new(wrap, "$ref", json_string(ref.data)) == 0) {
        char prefix[48], what[120];
        snprintf(prefix, sizeof prefix, "t%zu-p%zu-", ti, k);
        snprintf(what, sizeof what, " parameter '%.64s'", key);
        st = gw_schema(g, wrap, prefix, tool, what);
        if (st == HX_OK) tb_printf(&g->out, "t%zu-v%zu ::= %sroot\n", ti, k, prefix);
    }
    if (st == HX_E_NOMEM) hx_err_set(g->err, st, "tool '%s': out of memory", tool);
    json_decref(wrap);
    tb_free(&ref);
    return st;
}

/* Writes the keyword-argument rules of tool ti; the arguments start at rule tI-h0. Declared
 * properties only, in order, each optional one omittable (the chains of json_schema.c: hK is
 * "properties K.. with none written yet", tK "properties K.., each after a separator"). */
static hx_status kv_args(gwriter *g, const family_grammar *fg, hx_toolcall_family family, size_t ti,
                         const char *tool, json_t *params)
{
    const char              *fam = hx_toolcall_family_name(family);
    static const char *const top[] = {"$ref", "anyOf", "oneOf", "enum", "const"};
    for (size_t i = 0; i < HX_COUNTOF(top); i++)
        if (json_object_get(params, top[i]))
            return hx_err_set(g->err, HX_E_UNSUPPORTED,
                              "tool '%s': parameters with a top-level '%s' cannot be written as "
                              "keyword arguments (the %s call format)",
                              tool, top[i], fam);
    json_t *type = json_object_get(params, "type");
    if (type && !(json_is_string(type) && strcmp(json_string_value(type), "object") == 0))
        return hx_err_set(g->err, HX_E_UNSUPPORTED,
                          "tool '%s': parameters must describe an object to be written as keyword "
                          "arguments (the %s call format)",
                          tool, fam);
    /* The whole schema must be within the supported subset, as for the JSON families. */
    char           *text = NULL;
    hx_err          e = {0};
    const hx_status vst = hx_json_schema_to_grammar(params, &text, &e);
    hx_free(text);
    if (vst != HX_OK) return hx_err_set(g->err, vst, "tool '%s' parameters: %s", tool, e.msg);

    json_t *props = json_object_get(params, "properties"),
           *req = json_object_get(params, "required");
    const char *key;
    json_t     *schema;
    size_t      k = 0;
    json_object_foreach(props, key, schema)
    {
        if (!key_ok(key, fg->unquoted))
            return hx_err_set(g->err, HX_E_UNSUPPORTED,
                              "tool '%s': the parameter name '%.64s' cannot be written in the %s "
                              "call format (%s)",
                              tool, key, fam,
                              fg->unquoted ? "at most 200 bytes, no '>'"
                                           : "letters, digits, '_', '-' or '.', at most 200");
        const hx_status st = kv_value(g, fg, fam, ti, k, tool, params, key, schema);
        if (st != HX_OK) return st;
        char v[48];
        snprintf(v, sizeof v, "t%zu-v%zu", ti, k);
        tb_printf(&g->out, "t%zu-kv%zu ::= ", ti, k);
        gw_subst(g, fg->kv, key, v);
        tb_str(&g->out, "\n");
        k++;
    }
    const size_t n = k;
    tb_printf(&g->out, "t%zu-t%zu ::=\nt%zu-h%zu ::=\n", ti, n, ti, n);
    k = 0;
    json_object_foreach(props, key, schema)
    {
        bool required = false;
        for (size_t r = 0; r < json_array_size(req); r++)
            required |= json_is_string(json_array_get(req, r)) &&
                        strcmp(json_string_value(json_array_get(req, r)), key) == 0;
        char kv[48], sep_kv[96]; /* the argument, and the argument after a separator */
        snprintf(kv, sizeof kv, "t%zu-kv%zu", ti, k);
        snprintf(sep_kv, sizeof sep_kv, fg->kv_sep[0] ? "(%s %s)" : "%s%s", fg->kv_sep, kv);
        if (k > 0) /* t0 would be unused: the arguments start at h0 */
            tb_printf(&g->out, "t%zu-t%zu ::= %s%s t%zu-t%zu\n", ti, k, sep_kv, required ? "" : "?",
                      ti, k + 1);
        tb_printf(&g->out, "t%zu-h%zu ::= %s t%zu-t%zu", ti, k, kv, ti, k + 1);
        if (!required) tb_printf(&g->out, " | t%zu-h%zu", ti, k + 1);
        tb_str(&g->out, "\n");
        k++;
    }
    return HX_OK;
}

hx_status hx_tools_grammar(hx_toolcall_family family, json_t *norm_tools,
                           const hx_tool_choice *choice, bool parallel, char **out_text,
                           hx_err *err)
{
    if ((unsigned)family >= HX_TOOLCALL_COUNT)
        return hx_err_set(err, HX_E_INVALID, "tool grammar: unknown tool-call family %d",
                          (int)family);
    if (choice->kind != HX_TOOL_CHOICE_REQUIRED && choice->kind != HX_TOOL_CHOICE_NAMED)
        return hx_err_set(
            err, HX_E_INVALID,
            "tool grammar: only a required or named tool_choice constrains the reply");
    hx_status st = check_normalized(norm_tools, err);
    if (st != HX_OK) return st;
    if (json_array_size(norm_tools) == 0)
        return hx_err_set(err, HX_E_INVALID, "tool grammar: the request offers no tools");
    const ptrdiff_t named =
        choice->kind == HX_TOOL_CHOICE_NAMED ? find_tool(norm_tools, choice->name) : -1;
    if (choice->kind == HX_TOOL_CHOICE_NAMED && named < 0)
        return hx_err_set(err, HX_E_INVALID,
                          "tool grammar: tool_choice names '%.64s', which is not among the tools",
                          choice->name);

    const family_grammar *fg = &family_grammars[family];
    gwriter               g;
    gw_init(&g, err);
    for (size_t i = 0; i < json_array_size(norm_tools) && st == HX_OK; i++) {
        if (named >= 0 && (size_t)named != i) continue;
        json_t *t = json_array_get(norm_tools, i);
        char    prefix[32];
        snprintf(prefix, sizeof prefix, "t%zu-", i);
        st = fg->kv ? kv_args(&g, fg, family, i, tool_name(t), tool_params(t))
                    : gw_schema(&g, tool_params(t), prefix, tool_name(t), " parameters");
    }
    for (int l = 0; l < fg->n_env && st == HX_OK; l++) {
        const envelope *e = &fg->env[l];
        tb_printf(&g.out, "tc-l%d ::= %s%stc-c%d", l, e->begin, e->begin[0] ? " " : "", l);
        if (parallel) tb_printf(&g.out, " (%s%stc-c%d)*", e->sep, e->sep[0] ? " " : "", l);
        tb_printf(&g.out, "%s%s\ntc-c%d ::=", e->end[0] ? " " : "", e->end, l);
        for (size_t i = 0, n = 0; i < json_array_size(norm_tools); i++)
            if (named < 0 || (size_t)named == i)
                tb_printf(&g.out, "%s tc-c%d-t%zu", n++ ? " |" : "", l, i);
        tb_str(&g.out, "\n");
        for (size_t i = 0; i < json_array_size(norm_tools); i++) {
            if (named >= 0 && (size_t)named != i) continue;
            char args[32];
            snprintf(args, sizeof args, fg->kv ? "t%zu-h0" : "t%zu-root", i);
            tb_printf(&g.out, "tc-c%d-t%zu ::= ", l, i);
            gw_subst(&g, e->call, tool_name(json_array_get(norm_tools, i)), args);
            tb_str(&g.out, "\n");
        }
    }
    /* A newline may end the reply: after a call, models write one before deciding whether another
     * call follows, and it must not commit them to one (the parser drops it). */
    tb_str(&g.out, "root ::= (tc-l0");
    for (int l = 1; l < fg->n_env; l++)
        tb_printf(&g.out, " | tc-l%d", l);
    tb_str(&g.out, ") \"\\n\"?\n");
    if (st == HX_OK && g.out.oom) st = hx_err_set(err, HX_E_NOMEM, "tool grammar: out of memory");
    if (st != HX_OK) {
        tb_free(&g.out);
        return st;
    }
    *out_text = g.out.data;
    return HX_OK;
}

/* ---- calls as text ---- */

/* Keyword arguments: Python style k=JSON (", " between), or Qwen3-Coder's <parameter=k> blocks
 * with strings unquoted. */
static void write_kv(tbuf *b, json_t *args, bool xml)
{
    const char *key;
    json_t     *v;
    size_t      i = 0;
    json_object_foreach(args, key, v)
    {
        if (xml) {
            tb_str(b, "<parameter=");
            tb_str(b, key);
            tb_str(b, ">\n");
            if (json_is_string(v))
                tb_put(b, json_string_value(v), json_string_length(v));
            else
                tb_json(b, v);
            tb_str(b, "\n</parameter>\n");
        } else {
            tb_str(b, i++ ? ", " : "");
            tb_str(b, key);
            tb_str(b, "=");
            tb_json(b, v);
        }
    }
}

/* Appends calls ([{"name": string, "arguments": object}, ...], at least one) in family's markup,
 * as its chat template writes them and as its grammar accepts them. */
static void write_calls(tbuf *b, hx_toolcall_family f, json_t *calls)
{
    static const char *const begin[HX_TOOLCALL_COUNT] = {
        [HX_TOOLCALL_MISTRAL] = "[TOOL_CALLS][",
        [HX_TOOLCALL_GEMMA] = "```tool_code\n",
        [HX_TOOLCALL_DEEPSEEK_V3] = HX_DS_CALLS_BEGIN,
        [HX_TOOLCALL_PYTHONIC] = "[",
    };
    static const char *const end[HX_TOOLCALL_COUNT] = {
        [HX_TOOLCALL_MISTRAL] = "]",
        [HX_TOOLCALL_GEMMA] = "\n```",
        [HX_TOOLCALL_DEEPSEEK_V3] = HX_DS_CALLS_END,
        [HX_TOOLCALL_PYTHONIC] = "]",
    };
    const bool list = f == HX_TOOLCALL_MISTRAL || f == HX_TOOLCALL_PYTHONIC;
    tb_str(b, begin[f] ? begin[f] : "");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *c = json_array_get(calls, i), *name = json_object_get(c, "name");
        json_t *args = json_object_get(c, "arguments");
        if (i) tb_str(b, list ? ", " : "\n");
        switch (f) {
        case HX_TOOLCALL_GENERIC:
        case HX_TOOLCALL_HERMES:
        case HX_TOOLCALL_LLAMA3:
        case HX_TOOLCALL_MISTRAL:
            tb_str(b, f == HX_TOOLCALL_GENERIC || f == HX_TOOLCALL_HERMES ? "<tool_call>\n" : "");
            tb_str(b, "{\"name\": ");
            tb_json(b, name);
            tb_str(b, f == HX_TOOLCALL_LLAMA3 ? ", \"parameters\": " : ", \"arguments\": ");
            tb_json(b, args);
            tb_str(b, "}");
            tb_str(b, f == HX_TOOLCALL_GENERIC || f == HX_TOOLCALL_HERMES ? "\n</tool_call>" : "");
            break;
        case HX_TOOLCALL_QWEN3_CODER:
            tb_str(b, "<tool_call>\n<function=");
            tb_str(b, json_string_value(name));
            tb_str(b, ">\n");
            write_kv(b, args, true);
            tb_str(b, "</function>\n</tool_call>");
            break;
        case HX_TOOLCALL_GEMMA:
        case HX_TOOLCALL_PYTHONIC:
            tb_str(b, json_string_value(name));
            tb_str(b, "(");
            write_kv(b, args, false);
            tb_str(b, ")");
            break;
        case HX_TOOLCALL_DEEPSEEK_V3:
            tb_str(b, HX_DS_CALL_BEGIN "function" HX_DS_SEP);
            tb_str(b, json_string_value(name));
            tb_str(b, "\n```json\n");
            tb_json(b, args);
            tb_str(b, "\n```" HX_DS_CALL_END);
            break;
        case HX_TOOLCALL_COUNT:
            HX_ASSERT(!"family checked by the caller");
        }
    }
    tb_str(b, end[f] ? end[f] : "");
}

/* ---- system prompt ---- */

/* How to call a tool in each family's markup, and how to make several calls. */
static const struct {
    const char *form;
    const char *several;
} call_forms[HX_TOOLCALL_COUNT] = {
    [HX_TOOLCALL_GENERIC] = {"<tool_call>\n{\"name\": \"TOOL_NAME\", \"arguments\": {ARGUMENTS}}\n"
                             "</tool_call>",
                             "To call several tools, write one such block per call, each on its "
                             "own line."},
    [HX_TOOLCALL_HERMES] = {"<tool_call>\n{\"name\": \"TOOL_NAME\", \"arguments\": {ARGUMENTS}}\n"
                            "</tool_call>",
                            "To call several tools, write one such block per call, each on its own "
                            "line."},
    [HX_TOOLCALL_QWEN3_CODER] = {"<tool_call>\n<function=TOOL_NAME>\n<parameter=ARGUMENT_NAME>\n"
                                 "VALUE\n</parameter>\n</function>\n</tool_call>",
                                 "Write one <parameter> block per argument, a string as plain text "
                                 "and any other value as JSON. To call several tools, write one "
                                 "<tool_call> block per call, each on its own line."},
    [HX_TOOLCALL_LLAMA3] = {"{\"name\": \"TOOL_NAME\", \"parameters\": {ARGUMENTS}}",
                            "To call several tools, write one such object per call, separated by "
                            "\";\"."},
    [HX_TOOLCALL_MISTRAL] = {"[TOOL_CALLS][{\"name\": \"TOOL_NAME\", \"arguments\": {ARGUMENTS}}]",
                             "To call several tools, put one object per call in the list, "
                             "separated by \", \"."},
    [HX_TOOLCALL_GEMMA] = {"```tool_code\nTOOL_NAME(ARGUMENT_NAME=VALUE, ...)\n```",
                           "Write each value as JSON. To call several tools, write one call per "
                           "line inside the block."},
    [HX_TOOLCALL_DEEPSEEK_V3] = {HX_DS_CALLS_BEGIN HX_DS_CALL_BEGIN
                                 "function" HX_DS_SEP "TOOL_NAME\n"
                                 "```json\n{ARGUMENTS}\n```" HX_DS_CALL_END HX_DS_CALLS_END,
                                 "To call several tools, repeat the part from " HX_DS_CALL_BEGIN
                                 " to " HX_DS_CALL_END " once per call, each on its own line."},
    [HX_TOOLCALL_PYTHONIC] = {"[TOOL_NAME(ARGUMENT_NAME=VALUE, ...)]",
                              "Write each value as JSON. To call several tools, put all the calls "
                              "in the one list, separated by \", \"."},
};

hx_status hx_tools_system_prompt(json_t *norm_tools, hx_toolcall_family family, char **out_text,
                                 hx_err *err)
{
    if ((unsigned)family >= HX_TOOLCALL_COUNT)
        return hx_err_set(err, HX_E_INVALID, "tools prompt: unknown tool-call family %d",
                          (int)family);
    const hx_status st = check_normalized(norm_tools, err);
    if (st != HX_OK) return st;
    tbuf b = {0};
    tb_str(&b, "You can call tools to help you answer. Each line below describes one tool as "
               "JSON: its name, what it does, and the JSON Schema of its arguments.\n");
    for (size_t i = 0; i < json_array_size(norm_tools); i++) {
        tb_json(&b, json_object_get(json_array_get(norm_tools, i), "function"));
        tb_str(&b, "\n");
    }
    tb_str(&b, "\nTo call a tool, reply with the call and nothing else, written exactly like "
               "this, with the tool's name in place of TOOL_NAME and arguments that match its "
               "schema:\n");
    tb_str(&b, call_forms[family].form);
    tb_str(&b, "\n");
    tb_str(&b, call_forms[family].several);
    tb_str(&b, " The results come back in the next message. When no tool is needed, answer "
               "normally, without this markup.");
    if (b.oom) {
        tb_free(&b);
        return hx_err_set(err, HX_E_NOMEM, "tools prompt: out of memory");
    }
    *out_text = b.data;
    return HX_OK;
}

/* ---- template heuristics ---- */

typedef struct {
    const char *const *names;   /* identifiers to look for */
    const char *const *strings; /* string literals to look for */
} code_query;

static bool in_list(const char *const *list, const char *s, size_t n)
{
    for (; list && *list; list++)
        if (strlen(*list) == n && memcmp(*list, s, n) == 0) return true;
    return false;
}

/* Whether the code of template tpl ({{ }} and {% %}, not {# #}) has an identifier in q->names or
 * a string literal (either quote) in q->strings. */
static bool template_has(const char *tpl, const code_query *q)
{
    if (!tpl) return false;
    for (const char *p = tpl; *p;) {
        if (p[0] != '{' || (p[1] != '{' && p[1] != '%' && p[1] != '#')) {
            p++;
            continue;
        }
        const char close = p[1] == '{' ? '}' : p[1];
        if (close == '#') {
            const char *e = strstr(p + 2, "#}");
            if (!e) return false;
            p = e + 2;
            continue;
        }
        for (p += 2; *p && !(p[0] == close && p[1] == '}');) {
            if (*p == '\'' || *p == '"') {
                const char *s = p + 1;
                for (p = s; *p && *p != s[-1]; p++)
                    if (p[0] == '\\' && p[1]) p++;
                if (in_list(q->strings, s, (size_t)(p - s))) return true;
                if (*p) p++;
            } else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                       (*p >= '0' && *p <= '9')) {
                const char *s = p;
                while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                       (*p >= '0' && *p <= '9'))
                    p++;
                if (!(*s >= '0' && *s <= '9') && in_list(q->names, s, (size_t)(p - s))) return true;
            } else {
                p++;
            }
        }
        if (*p) p += 2;
    }
    return false;
}

bool hx_tools_template_renders_tools(const char *tpl)
{
    static const char *const names[] = {"tools", NULL};
    return template_has(tpl, &(code_query){names, NULL});
}

bool hx_tools_template_has_tool_calls(const char *tpl)
{
    static const char *const words[] = {"tool_calls", NULL};
    return template_has(tpl, &(code_query){words, words});
}

bool hx_tools_template_has_tool_role(const char *tpl)
{
    static const char *const roles[] = {"tool", "ipython", NULL};
    return template_has(tpl, &(code_query){NULL, roles});
}

/* ---- folding messages ---- */

/* The text of a tool result's content: a string, the texts of an array of parts joined by
 * newlines, "" for none, else its JSON. */
static void content_text(tbuf *b, json_t *content)
{
    if (json_is_string(content)) {
        tb_put(b, json_string_value(content), json_string_length(content));
    } else if (json_is_array(content)) {
        for (size_t i = 0, n = 0; i < json_array_size(content); i++) {
            json_t *text = json_object_get(json_array_get(content, i), "text");
            if (!json_is_string(text)) continue;
            tb_str(b, n++ ? "\n" : "");
            tb_put(b, json_string_value(text), json_string_length(text));
        }
    } else if (content && !json_is_null(content)) {
        tb_json(b, content);
    }
}

/* The arguments value a of a call as an object (new reference): an object, or a string holding
 * one; absent or null is {}. NULL when it is neither. */
static json_t *args_object(json_t *a)
{
    if (!a || json_is_null(a)) return json_object();
    if (json_is_object(a)) return json_incref(a);
    if (!json_is_string(a)) return NULL;
    json_t *o = json_loadb(json_string_value(a), json_string_length(a), 0, NULL);
    if (json_is_object(o)) return o;
    json_decref(o);
    return NULL;
}

/* messages[i] (m, an assistant message with tool_calls) with the calls written into its content.
 * New reference in *out. */
static hx_status fold_calls(json_t *m, size_t i, hx_toolcall_family family, json_t **out,
                            hx_err *err)
{
    char      got[48];
    json_t   *tcs = json_object_get(m, "tool_calls"), *calls = json_array(), *nm = NULL;
    hx_status st = HX_E_NOMEM;
    tbuf      b = {0};
    if (!calls) goto fail;
    for (size_t k = 0; k < json_array_size(tcs); k++) {
        json_t *tc = json_array_get(tcs, k), *fn = json_object_get(tc, "function");
        if (!json_is_object(fn)) fn = tc;
        json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name) || json_string_length(name) == 0) {
            describe(name, got, sizeof got);
            st = hx_err_set(err, HX_E_INVALID,
                            "messages[%zu].tool_calls[%zu].function.name must be a non-empty "
                            "string, got %s",
                            i, k, got);
            goto fail;
        }
        json_t *args = args_object(json_object_get(fn, "arguments"));
        if (!args) {
            describe(json_object_get(fn, "arguments"), got, sizeof got);
            st = hx_err_set(err, HX_E_INVALID,
                            "messages[%zu].tool_calls[%zu].function.arguments must be a JSON "
                            "object or a string holding one, got %s",
                            i, k, got);
            goto fail;
        }
        if (json_array_append_new(calls,
                                  json_pack("{s:O, s:o}", "name", name, "arguments", args)) != 0)
            goto fail;
    }
    json_t *content = field(m, "content");
    if (json_is_string(content) && json_string_length(content) > 0) {
        tb_put(&b, json_string_value(content), json_string_length(content));
        tb_str(&b, "\n");
    } else if (content && !json_is_string(content) && !json_is_array(content)) {
        describe(content, got, sizeof got);
        st = hx_err_set(err, HX_E_INVALID,
                        "messages[%zu].content must be a string, an array of parts or null, got %s",
                        i, got);
        goto fail;
    }
    write_calls(&b, family, calls);
    if (b.oom || !(nm = json_copy(m)) || json_object_del(nm, "tool_calls") != 0) goto fail;
    if (json_is_array(content)) {
        json_t    *parts = json_copy(content);
        const bool ok = parts &&
                        json_array_append_new(
                            parts, json_pack("{s:s, s:s}", "type", "text", "text", b.data)) == 0 &&
                        json_object_set(nm, "content", parts) == 0;
        json_decref(parts);
        if (!ok) goto fail;
    } else if (json_object_set_new(nm, "content", json_string(b.data)) != 0) {
        goto fail;
    }
    *out = nm;
    json_decref(calls);
    tb_free(&b);
    return HX_OK;
fail:
    if (st == HX_E_NOMEM) hx_err_set(err, st, "messages[%zu]: out of memory", i);
    json_decref(nm);
    json_decref(calls);
    tb_free(&b);
    return st;
}

/* A copy of messages[i] (m) with each tool_calls[k].function.arguments that is a string holding
 * a JSON object replaced by the object. */
static hx_status parse_arguments(json_t *m, json_t **out)
{
    json_t *tcs = json_object_get(m, "tool_calls"), *ntcs = NULL, *nm = NULL;
    for (size_t k = 0; k < json_array_size(tcs); k++) {
        json_t *tc = json_array_get(tcs, k), *fn = json_object_get(tc, "function");
        json_t *a = json_object_get(fn, "arguments");
        json_t *o = json_is_string(a) ? args_object(a) : NULL;
        if (!o) continue;
        json_t *nfn = json_copy(fn), *ntc = json_copy(tc);
        if (!ntcs) ntcs = json_copy(tcs);
        const bool ok = nfn && ntc && ntcs && json_object_set(nfn, "arguments", o) == 0 &&
                        json_object_set(ntc, "function", nfn) == 0 &&
                        json_array_set(ntcs, k, ntc) == 0;
        json_decref(o);
        json_decref(nfn);
        json_decref(ntc);
        if (!ok) {
            json_decref(ntcs);
            return HX_E_NOMEM;
        }
    }
    if (!ntcs) {
        *out = json_copy(m);
        return *out ? HX_OK : HX_E_NOMEM;
    }
    const bool ok = (nm = json_copy(m)) && json_object_set(nm, "tool_calls", ntcs) == 0;
    json_decref(ntcs);
    if (!ok) {
        json_decref(nm);
        return HX_E_NOMEM;
    }
    *out = nm;
    return HX_OK;
}

static bool has_role(json_t *m, const char *role)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    return r && strcmp(r, role) == 0;
}

hx_status hx_tools_fold_messages(json_t *messages, hx_toolcall_family family,
                                 bool template_has_tool_calls, bool template_has_tool_role,
                                 json_t **out, hx_err *err)
{
    char got[48];
    if ((unsigned)family >= HX_TOOLCALL_COUNT)
        return hx_err_set(err, HX_E_INVALID, "messages: unknown tool-call family %d", (int)family);
    if (!json_is_array(messages)) {
        describe(messages, got, sizeof got);
        return hx_err_set(err, HX_E_INVALID, "messages must be an array, got %s", got);
    }
    json_t      *res = json_array();
    hx_status    st = res ? HX_OK : HX_E_NOMEM;
    const size_t n = json_array_size(messages);
    for (size_t i = 0; i < n && st == HX_OK;) {
        json_t *m = json_array_get(messages, i), *nm = NULL;
        if (!json_is_object(m)) {
            describe(m, got, sizeof got);
            st = hx_err_set(err, HX_E_INVALID, "messages[%zu] must be an object, got %s", i, got);
            break;
        }
        if (!template_has_tool_role && has_role(m, "tool")) {
            tbuf b = {0};
            for (size_t j = i; i < n && has_role(json_array_get(messages, i), "tool"); i++) {
                tb_str(&b, i > j ? "\n<tool_response>\n" : "<tool_response>\n");
                content_text(&b, json_object_get(json_array_get(messages, i), "content"));
                tb_str(&b, "\n</tool_response>");
            }
            nm = b.oom ? NULL : json_pack("{s:s, s:s}", "role", "user", "content", b.data);
            tb_free(&b);
            if (!nm) st = HX_E_NOMEM;
        } else {
            json_t    *tcs = json_object_get(m, "tool_calls");
            const bool calls = has_role(m, "assistant") && json_array_size(tcs) > 0;
            if (calls && !template_has_tool_calls)
                st = fold_calls(m, i, family, &nm, err);
            else if (calls)
                st = parse_arguments(m, &nm);
            else if (!(nm = json_copy(m)))
                st = HX_E_NOMEM;
            i++;
        }
        if (st == HX_OK && json_array_append_new(res, nm) != 0) st = HX_E_NOMEM;
    }
    if (st == HX_E_NOMEM) hx_err_set(err, st, "messages: out of memory");
    if (st != HX_OK) {
        json_decref(res);
        return st;
    }
    *out = res;
    return HX_OK;
}
