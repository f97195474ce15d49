/* jinja_int.h - declarations shared by the files of the template module (not a public header).
 *
 * The pipeline is lexer (jinja_lex.c: source -> tokens) -> parser (jinja_parse.c: tokens -> AST,
 * owned by the template's arena) -> evaluator (jinja_eval.c: AST + context -> text), with values
 * and their Python semantics in jinja_value.c, filters and tests in jinja_filters.c and methods
 * and globals in jinja_methods.c. Everything a render creates lives in one arena that the render
 * frees at the end, so no value is ever freed on its own and values may share structure freely.
 * Errors inside a render are recorded once in hx_jrender (first failure wins) and travel up as
 * return code -1; the evaluator adds the line and column of the innermost node that failed. */
#ifndef HX_TEMPLATE_JINJA_INT_H
#define HX_TEMPLATE_JINJA_INT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "template/jinja.h"

/* ---- arena ---- */

typedef struct hx_jarena_block hx_jarena_block;
typedef struct {
    hx_jarena_block *head;
    size_t           used_bytes;  /* sum of block capacities */
    size_t           limit_bytes; /* 0: unlimited */
    bool             over_limit;  /* an allocation failed because of limit_bytes, not the heap */
} hx_jarena;

/* size bytes aligned to 16, or NULL when out of memory or over the limit. */
void *hx_jarena_alloc(hx_jarena *a, size_t size);
void  hx_jarena_free(hx_jarena *a); /* releases every block; the arena may be reused */

/* ---- strings and buffers ---- */

typedef struct {
    size_t len;
    char   s[]; /* len bytes, then a NUL */
} hx_jstr;

hx_jstr *hx_jstr_new(hx_jarena *a, const char *s, size_t len);
bool     hx_jstr_eq(const hx_jstr *a, const char *s, size_t len);

/* A growable byte buffer carved from an arena. Failures are sticky: after one, appends do
 * nothing and `fail` says why (1: out of memory, 2: over `limit`). */
typedef struct {
    hx_jarena *a;
    char      *p;
    size_t     len, cap;
    size_t     limit; /* 0: none */
    int        fail;
} hx_jbuf;

void hx_jbuf_init(hx_jbuf *b, hx_jarena *a, size_t limit);
void hx_jbuf_add(hx_jbuf *b, const char *s, size_t n);
void hx_jbuf_addc(hx_jbuf *b, char c);
void hx_jbuf_adds(hx_jbuf *b, const char *s);
void hx_jbuf_addf(hx_jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hx_jbuf_add_cp(hx_jbuf *b, uint32_t cp); /* one code point as UTF-8 */

/* ---- Unicode helpers (Python's definitions, via utf8proc) ---- */

/* Decodes one code point at s[*i] (n bytes total) and advances *i; invalid bytes decode as
 * themselves (U+DC80.. style is not needed: input is checked UTF-8 or passes through). */
uint32_t hx_ju_next(const char *s, size_t n, size_t *i);
size_t   hx_ju_len(const char *s, size_t n);    /* code points */
bool     hx_ju_isspace(uint32_t cp);            /* str.isspace() */
bool     hx_ju_isprintable(uint32_t cp);        /* str.isprintable() */
uint32_t hx_ju_upper(uint32_t cp);
uint32_t hx_ju_lower(uint32_t cp);
uint32_t hx_ju_title(uint32_t cp);
bool     hx_ju_iscased(uint32_t cp);            /* upper, lower or title case letter */
bool     hx_ju_isalnum(uint32_t cp);
bool     hx_ju_isdigit(uint32_t cp);
bool     hx_ju_isalpha(uint32_t cp);

/* ---- values ---- */

typedef enum {
    HX_JV_UNDEF, HX_JV_NONE, HX_JV_BOOL, HX_JV_INT, HX_JV_FLOAT, HX_JV_STR,
    HX_JV_LIST, HX_JV_TUPLE, HX_JV_DICT, HX_JV_NS, HX_JV_FUNC, HX_JV_LOOP, HX_JV_TYPE_COUNT
} hx_jtype;

/* What an Undefined stands for, which only changes its error message. */
enum {
    HX_JU_NAME,    /* 'x' is undefined */
    HX_JU_ATTR,    /* 'dict object' has no attribute 'x' */
    HX_JU_UNSAFE,  /* access to attribute 'append' of 'list' object is unsafe */
    HX_JU_HINT,    /* u.name is the whole message */
    HX_JU_MISSING  /* internal: an argument that was not passed (never reaches a template) */
};

typedef struct hx_jlist  hx_jlist;
typedef struct hx_jdict  hx_jdict;
typedef struct hx_jfunc  hx_jfunc;
typedef struct hx_jloop  hx_jloop;

typedef struct {
    uint8_t type; /* hx_jtype */
    uint8_t flag; /* STR: 1 = Markup (markupsafe's "safe" string); UNDEF: HX_JU_* */
    uint8_t aux;  /* UNDEF of HX_JU_ATTR/UNSAFE: hx_jtype of the object that lacked it */
    union {
        bool           b;
        int64_t        i;
        double         f;
        hx_jstr       *s;
        hx_jlist      *l;    /* LIST and TUPLE */
        hx_jdict      *d;    /* DICT and NS */
        hx_jfunc      *fn;
        hx_jloop      *loop;
        const hx_jstr *name; /* UNDEF */
    } u;
} hx_jv;

/* A LIST value with flag 1 is a Python iterator (what map, select, selectattr, items and reverse
 * return in jinja2): always true, no len(), printed as a generator, and exhausted by its first
 * full iteration. */
struct hx_jlist {
    size_t n, cap;
    hx_jv *v;
    bool   consumed; /* an iterator already iterated */
};

/* Insertion-ordered, like Python's dict. Lookups scan: template dicts are small, and the
 * evaluator charges big scans to the step budget. */
struct hx_jdict {
    size_t n, cap;
    hx_jv *k;
    hx_jv *v;
};

typedef struct hx_jnode  hx_jnode;
typedef struct hx_jscope hx_jscope;

enum { HX_JF_BUILTIN, HX_JF_METHOD, HX_JF_MACRO, HX_JF_CALLER, HX_JF_LOOP_METHOD };

struct hx_jfunc {
    int             kind;
    int             id;      /* BUILTIN / METHOD / LOOP_METHOD: which one */
    hx_jv           self;    /* METHOD: the bound object */
    const hx_jnode *def;     /* MACRO: the macro node; CALLER: the call block node */
    hx_jscope      *closure; /* MACRO / CALLER: the scope the body sees */
    hx_jloop       *loop;    /* LOOP_METHOD */
};

struct hx_jloop {
    const hx_jlist *items;
    int64_t         index0;
    hx_jv           changed_last; /* loop.changed() state */
    bool            changed_any;
};

/* Value constructors; compound literals keep them one line each. */
static inline hx_jv hx_jv_undef(void) { return (hx_jv){.type = HX_JV_UNDEF}; }
static inline hx_jv hx_jv_none(void) { return (hx_jv){.type = HX_JV_NONE}; }
static inline hx_jv hx_jv_bool(bool b) { return (hx_jv){.type = HX_JV_BOOL, .u.b = b}; }
static inline hx_jv hx_jv_int(int64_t i) { return (hx_jv){.type = HX_JV_INT, .u.i = i}; }
static inline hx_jv hx_jv_float(double f) { return (hx_jv){.type = HX_JV_FLOAT, .u.f = f}; }
static inline hx_jv hx_jv_of_str(hx_jstr *s) { return (hx_jv){.type = HX_JV_STR, .u.s = s}; }
static inline hx_jv hx_jv_of_list(hx_jlist *l, hx_jtype t)
{
    hx_jv v = {0};
    v.type = (uint8_t)t;
    v.u.l = l;
    return v;
}
static inline hx_jv hx_jv_of_dict(hx_jdict *d, hx_jtype t)
{
    hx_jv v = {0};
    v.type = (uint8_t)t;
    v.u.d = d;
    return v;
}
static inline hx_jv hx_jv_undef_named(int kind, const hx_jstr *name, int owner_type)
{
    hx_jv v = {0};
    v.type = HX_JV_UNDEF;
    v.flag = (uint8_t)kind;
    v.aux = (uint8_t)owner_type;
    v.u.name = name;
    return v;
}
static inline bool hx_jv_is_missing(hx_jv v)
{
    return v.type == HX_JV_UNDEF && v.flag == HX_JU_MISSING;
}
static inline bool hx_jv_is_list(hx_jv v) { return v.type == HX_JV_LIST || v.type == HX_JV_TUPLE; }
static inline bool hx_jv_is_num(hx_jv v)
{
    return v.type == HX_JV_INT || v.type == HX_JV_FLOAT || v.type == HX_JV_BOOL;
}
/* A number's value as a double (bool counts as 0/1, as in Python). */
static inline double hx_jv_num(hx_jv v)
{
    return v.type == HX_JV_FLOAT ? v.u.f : v.type == HX_JV_BOOL ? (double)v.u.b : (double)v.u.i;
}

/* ---- render state ---- */

typedef struct hx_jrender {
    hx_jarena          arena;
    hx_template_limits lim;
    hx_jdict          *ctx;   /* the context's variables */
    int64_t            steps;
    int32_t            depth; /* nested macro calls and captured blocks (lim.max_depth) */
    int32_t            stack; /* nested evaluations of any kind, for C stack safety */
    /* first failure */
    bool               failed;
    bool               located; /* line/col below are set */
    hx_status          status;
    int32_t            line, col;
    char               msg[400];
} hx_jrender;

/* Records the first failure (HX_E_INVALID) and returns -1. */
int hx_jfail(hx_jrender *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hx_jnomem(hx_jrender *r); /* out of memory, or the memory limit; returns -1 */
int hx_jbuf_check(hx_jrender *r, const hx_jbuf *b); /* 0, or records b's failure and -1 */

/* Allocation helpers that record the failure. */
void     *hx_jalloc(hx_jrender *r, size_t size);
hx_jstr  *hx_jstr_make(hx_jrender *r, const char *s, size_t len);
hx_jlist *hx_jlist_new(hx_jrender *r, size_t cap);
int       hx_jlist_push(hx_jrender *r, hx_jlist *l, hx_jv v);
hx_jdict *hx_jdict_new(hx_jrender *r, size_t cap);
int       hx_jdict_set(hx_jrender *r, hx_jdict *d, hx_jv k, hx_jv v); /* replaces in place */
hx_jv    *hx_jdict_get(const hx_jdict *d, hx_jv k);                   /* NULL when absent */
hx_jv    *hx_jdict_get_str(const hx_jdict *d, const char *s, size_t len);
int       hx_jv_make_str(hx_jrender *r, const char *s, size_t len, hx_jv *out);

/* ---- value semantics (jinja_value.c) ---- */

/* How deep printing, tojson, comparison and JSON import may recurse into nested values: about
 * where Python's own recursion limit stops repr() and json.dumps(). */
#define HX_JMAX_VALUE_DEPTH 1000

bool        hx_jv_truthy(hx_jv v);
bool        hx_jv_hashable(hx_jv v, int depth); /* usable as a dict key / set member */
const char *hx_jv_type_name(hx_jv v); /* Python's: "str", "dict", "NoneType", ... */
/* Python ==. Adds the work done to *work when not NULL (the render's step counter, checked by
 * the caller's next hx_jstep); nesting past HX_JMAX_VALUE_DEPTH compares unequal. */
bool hx_jv_eq(hx_jv a, hx_jv b, int64_t *work);
/* Python's <, returning -1/0/1 in *out; fails (TypeError) on unorderable types. */
int hx_jv_cmp(hx_jrender *r, hx_jv a, hx_jv b, int *out);
/* str(v) and repr(v) appended to b; fail only on depth, memory or an Undefined that raises. */
int hx_jv_str_append(hx_jrender *r, hx_jbuf *b, hx_jv v);
int hx_jv_repr_append(hx_jrender *r, hx_jbuf *b, hx_jv v, int depth);
/* str(v) as a string (the same object for strings). */
int hx_jv_to_str(hx_jrender *r, hx_jv v, hx_jstr **out);
/* Python's repr of a float ("1.0", "1e-05", "inf"). buf needs 32 bytes. */
void hx_jfloat_repr(double f, char *buf);
/* json.dumps as transformers' tojson calls it. indent: NULL for none; sep: item and key
 * separators. */
typedef struct {
    const hx_jstr *indent;
    const char    *item_sep, *key_sep;
    bool           ensure_ascii, sort_keys;
} hx_jjson_opts;
int hx_jv_tojson(hx_jrender *r, hx_jbuf *b, hx_jv v, const hx_jjson_opts *o, int depth);
/* Converts a jansson value (borrowed) into arena values. */
int hx_jv_from_json(hx_jrender *r, json_t *j, hx_jv *out, int depth);
/* Raises the error an operation on this Undefined raises; returns -1. */
int hx_jv_undef_fail(hx_jrender *r, hx_jv v);
/* Appends s with & < > " ' HTML-escaped (markupsafe.escape). */
void hx_jhtml_escape(hx_jbuf *b, const char *s, size_t n);
/* The iteration view of v: a list for lists/tuples, keys of dicts, code points of strings,
 * empty for Undefined; fails for non-iterables. */
int hx_jv_iter(hx_jrender *r, hx_jv v, const hx_jlist **out);
/* len(v) in code points / items; fails for values without a length. */
int hx_jv_len(hx_jrender *r, hx_jv v, int64_t *out);

/* ---- AST (jinja_parse.c builds it, jinja_eval.c walks it) ---- */

typedef enum {
    /* statements */
    HX_JN_TEXT, HX_JN_OUTPUT, HX_JN_IF, HX_JN_FOR, HX_JN_SET, HX_JN_SET_BLOCK, HX_JN_MACRO,
    HX_JN_CALL_BLOCK, HX_JN_FILTER_BLOCK, HX_JN_BREAK, HX_JN_CONTINUE, HX_JN_SCOPE, HX_JN_WITH,
    /* expressions */
    HX_JN_CONST, HX_JN_NAME, HX_JN_NSREF, HX_JN_LIST, HX_JN_TUPLE, HX_JN_DICT, HX_JN_GETATTR,
    HX_JN_GETITEM, HX_JN_SLICE, HX_JN_CALL, HX_JN_FILTER, HX_JN_TEST, HX_JN_NOT, HX_JN_NEG,
    HX_JN_POS, HX_JN_BINOP, HX_JN_AND, HX_JN_OR, HX_JN_CONCAT, HX_JN_COMPARE, HX_JN_COND
} hx_jnode_kind;

/* Binary and comparison operators. */
enum {
    HX_JO_ADD, HX_JO_SUB, HX_JO_MUL, HX_JO_DIV, HX_JO_FLOORDIV, HX_JO_MOD, HX_JO_POW,
    HX_JO_EQ, HX_JO_NE, HX_JO_LT, HX_JO_LE, HX_JO_GT, HX_JO_GE, HX_JO_IN, HX_JO_NOTIN
};

/* Macro flags: what the body reads, which decides what a call may pass. */
enum { HX_JM_CALLER = 1, HX_JM_VARARGS = 2, HX_JM_KWARGS = 4 };

typedef struct {
    hx_jnode **v;
    int32_t    n;
} hx_jnodes;

/* One node shape for every construct; the comment on each kind in jinja_parse.c says which
 * fields it uses. */
struct hx_jnode {
    uint8_t    kind;  /* hx_jnode_kind */
    uint8_t    op;    /* BINOP: HX_JO_*; macro flags; FOR: 1 when recursive */
    int32_t    line, col;
    int32_t    id;    /* FILTER / TEST: table index */
    hx_jstr   *name;  /* NAME, GETATTR, NSREF attribute, FILTER/TEST name, MACRO name */
    hx_jstr   *name2; /* NSREF: the namespace variable */
    hx_jv      value; /* CONST, TEXT */
    hx_jnode  *a, *b, *c;
    hx_jnodes  list;  /* items, positional args, body, compare operands, dict keys */
    hx_jnodes  list2; /* keyword arg values, else body, macro defaults, dict values */
    hx_jstr  **names; /* keyword arg names, macro parameters */
    int32_t    n_names;
    uint8_t   *ops;   /* COMPARE: one operator per operand */
};

struct hx_template {
    hx_jarena arena; /* owns every node and string below */
    hx_jnodes body;
};

/* ---- lexer ---- */

typedef enum {
    HX_JT_EOF, HX_JT_DATA, HX_JT_VAR_BEGIN, HX_JT_VAR_END, HX_JT_BLOCK_BEGIN, HX_JT_BLOCK_END,
    HX_JT_NAME, HX_JT_STRING, HX_JT_INT, HX_JT_FLOAT,
    /* operators */
    HX_JT_ADD, HX_JT_SUB, HX_JT_DIV, HX_JT_FLOORDIV, HX_JT_MUL, HX_JT_MOD, HX_JT_POW,
    HX_JT_TILDE, HX_JT_LBRACKET, HX_JT_RBRACKET, HX_JT_LPAREN, HX_JT_RPAREN, HX_JT_LBRACE,
    HX_JT_RBRACE, HX_JT_EQ, HX_JT_NE, HX_JT_GT, HX_JT_GTEQ, HX_JT_LT, HX_JT_LTEQ, HX_JT_ASSIGN,
    HX_JT_DOT, HX_JT_COLON, HX_JT_PIPE, HX_JT_COMMA, HX_JT_SEMICOLON
} hx_jtok_type;

typedef struct {
    uint8_t  type;
    int32_t  line, col;
    hx_jstr *s; /* DATA, NAME, STRING */
    int64_t  i; /* INT */
    double   f; /* FLOAT */
} hx_jtoken;

/* Tokenizes src into *toks (n tokens, the last one EOF), all in arena a. On failure returns
 * HX_E_INVALID or HX_E_NOMEM with "line L, column C: message" in err. */
hx_status hx_jlex(hx_jarena *a, const char *src, size_t len, hx_jtoken **toks, size_t *n,
                  hx_err *err);

/* ---- calls: arguments and binding ---- */

typedef struct {
    const hx_jv    *pos;
    int32_t         n_pos;
    hx_jstr *const *kw_names;
    const hx_jv    *kw;
    int32_t         n_kw;
} hx_jargs;

/* Binds args to params Python-style: out[i] is the argument for params[i] or a MISSING value.
 * Fails on too many positional arguments, unknown keywords and duplicates; the first n_required
 * parameters must be given. `what` names the callee in messages. */
int hx_jargs_bind(hx_jrender *r, const char *what, const hx_jargs *a, const char *const *params,
                  int n_params, int n_required, hx_jv *out);

/* ---- filters and tests (jinja_filters.c) ---- */

int hx_jfilter_find(const char *name, size_t len); /* index or -1 */
int hx_jtest_find(const char *name, size_t len);   /* index or -1 */
int hx_jfilter_call(hx_jrender *r, int id, hx_jv in, const hx_jargs *a, hx_jv *out);
int hx_jtest_call(hx_jrender *r, int id, hx_jv in, const hx_jargs *a, bool *out);

/* ---- methods and globals (jinja_methods.c) ---- */

/* The method `name` of a value of type t: its id, or -1 when t has no such attribute. *unsafe
 * is set for methods the immutable sandbox refuses (list.append, dict.pop, ...). */
int hx_jmethod_find(hx_jv self, const char *name, size_t len, bool *unsafe);
int hx_jmethod_call(hx_jrender *r, const hx_jfunc *fn, const hx_jargs *a, hx_jv *out);
int hx_jglobal_find(const char *name, size_t len); /* builtin id or -1 */
int hx_jglobal_call(hx_jrender *r, int id, const hx_jargs *a, hx_jv *out);
/* Python's printf-style `fmt % args` (args: a tuple's items, or one value). */
int hx_jpercent_format(hx_jrender *r, const hx_jstr *fmt, hx_jv args, hx_jv *out);
/* Makes v a Markup string (str(v) for non-strings), as markupsafe.Markup(v) does. */
int hx_jmarkup_of(hx_jrender *r, hx_jv v, hx_jv *out);

/* Python str methods shared by methods and filters. mode for strip: 1 left, 2 right, 3 both;
 * chars NULL means whitespace. */
int hx_jstr_strip(hx_jrender *r, hx_jv s, const hx_jstr *chars, int mode, hx_jv *out);
enum { HX_JCASE_UPPER, HX_JCASE_LOWER, HX_JCASE_CAPITALIZE, HX_JCASE_TITLE, HX_JCASE_SWAP };
int hx_jstr_case(hx_jrender *r, hx_jv s, int how, hx_jv *out);
int hx_jstr_replace(hx_jrender *r, const hx_jstr *s, const hx_jstr *old, const hx_jstr *rep,
                    int64_t count, hx_jv *out);
int hx_jstr_splitlines(hx_jrender *r, const hx_jstr *s, bool keepends, hx_jlist **out);

/* ---- evaluator services for filters (jinja_eval.c) ---- */

/* obj.name / obj[key] with jinja2's sandboxed getattr/getitem fallbacks. */
int hx_jgetattr(hx_jrender *r, hx_jv obj, const hx_jstr *name, hx_jv *out);
int hx_jgetitem(hx_jrender *r, hx_jv obj, hx_jv key, hx_jv *out);
/* Calls any callable value (macro, builtin, method). */
int hx_jcall_value(hx_jrender *r, hx_jv fn, const hx_jargs *a, hx_jv *out);
/* Charges n units of work; fails past the step limit. */
int hx_jstep(hx_jrender *r, int64_t n);
/* Charges a substring search: its worst case multiplies the two lengths. */
static inline int hx_jstep_search(hx_jrender *r, size_t hay, size_t needle)
{
    return hx_jstep(r, (int64_t)(hay / 16 + 1) * (int64_t)(needle / 64 + 1));
}

/* First occurrence of n[0..nn) in h[0..hn), or NULL; an empty needle is found at h. */
const char *hx_jfind(const char *h, size_t hn, const char *n, size_t nn);

#endif
