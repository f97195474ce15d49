/* jinja_parse.c - tokens to the template's AST, and the compile entry point.
 *
 * A recursive-descent parser that mirrors jinja2's parser.py function by function, so operator
 * precedence, tuple rules, filter/test argument forms and statement grammar agree with it:
 *   condexpr > or > and > not > compare (chained, in, not in) > + - > ~ > * / // % > ** (left
 *   associative, as in jinja2) > unary - + > primary with postfix . [] () > | filters, is tests.
 * Statements: if/elif/else, for (targets, `if` filter, else, recursive), set (expression,
 * namespace attribute, block with filters), macro, call, filter, with, print, break, continue
 * and transformers' generation. Filters and tests are resolved to table indexes here, so an
 * unknown one is a compile error as in jinja2. Nodes live in the template's arena; nesting is
 * capped (MAX_DEPTH) so hostile input cannot exhaust the C stack. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "template/jinja_int.h"

#define MAX_DEPTH 200

typedef struct {
    hx_jarena *a;
    hx_jtoken *t;
    size_t     n, i;
    int        depth;
    hx_err    *err;
    bool       failed;
    hx_status  status; /* of the first failure */
} parser;

/* A growable node list used while parsing; copied to its final size at the end. */
typedef struct {
    hx_jnode **v;
    int32_t    n, cap;
} nvec;

/* ---- token stream ---- */

static hx_jtoken *cur(parser *p) { return &p->t[p->i]; }
static hx_jtoken *look(parser *p) { return &p->t[p->i + 1 < p->n ? p->i + 1 : p->i]; }
static hx_jtoken *advance(parser *p)
{
    hx_jtoken *t = cur(p);
    if (p->i + 1 < p->n) p->i++;
    return t;
}

static bool tok_is_name(const hx_jtoken *t, const char *s)
{
    return t->type == HX_JT_NAME && strcmp(t->s->s, s) == 0;
}

static const char *describe_type(int type)
{
    static const char *names[] = {
        "end of template", "template data", "begin of print statement", "end of print statement",
        "begin of statement block", "end of statement block", "name", "string", "integer",
        "float", "+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{", "}", "==",
        "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";",
    };
    return (size_t)type < HX_COUNTOF(names) ? names[type] : "token";
}

static const char *describe(const hx_jtoken *t)
{
    return t->type == HX_JT_NAME ? t->s->s : describe_type(t->type);
}

static void *fail(parser *p, const hx_jtoken *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void *fail(parser *p, const hx_jtoken *t, const char *fmt, ...)
{
    if (p->failed) return NULL;
    p->failed = true;
    p->status = HX_E_INVALID;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hx_err_set(p->err, HX_E_INVALID, "line %d, column %d: %s", (int)t->line, (int)t->col, msg);
    return NULL;
}

static void *nomem(parser *p)
{
    if (!p->failed) {
        p->failed = true;
        p->status = HX_E_NOMEM;
        hx_err_set(p->err, HX_E_NOMEM, "out of memory compiling a template");
    }
    return NULL;
}

static bool expect(parser *p, int type)
{
    hx_jtoken *t = cur(p);
    if (t->type != type) {
        fail(p, t, "expected '%s', got '%s'", describe_type(type), describe(t));
        return false;
    }
    advance(p);
    return true;
}

static bool expect_name(parser *p, const char *name)
{
    hx_jtoken *t = cur(p);
    if (!tok_is_name(t, name)) {
        fail(p, t, "expected '%s', got '%s'", name, describe(t));
        return false;
    }
    advance(p);
    return true;
}

/* ---- nodes ---- */

static hx_jnode *mk(parser *p, int kind, const hx_jtoken *at)
{
    hx_jnode *n = hx_jarena_alloc(p->a, sizeof *n);
    if (!n) return nomem(p);
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static bool nvec_push(parser *p, nvec *v, hx_jnode *n)
{
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 4;
        hx_jnode **nv = hx_jarena_alloc(p->a, (size_t)cap * sizeof *nv);
        if (!nv) {
            nomem(p);
            return false;
        }
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;
    return true;
}

static hx_jnodes to_nodes(nvec v)
{
    hx_jnodes r = {v.v, v.n};
    return r;
}

/* Keyword names collected alongside their values. */
typedef struct {
    hx_jstr **v;
    int32_t   n, cap;
} svec;

static bool svec_push(parser *p, svec *v, hx_jstr *s)
{
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 4;
        hx_jstr **nv = hx_jarena_alloc(p->a, (size_t)cap * sizeof *nv);
        if (!nv) {
            nomem(p);
            return false;
        }
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = s;
    return true;
}

static bool enter(parser *p)
{
    if (++p->depth > MAX_DEPTH) {
        fail(p, cur(p), "template nested too deeply");
        return false;
    }
    return true;
}

/* ---- expressions ---- */

static hx_jnode *parse_expression(parser *p, bool with_condexpr);
static hx_jnode *parse_tuple(parser *p, bool simplified, bool with_condexpr,
                             const char *const *extra_end, bool explicit_parens,
                             bool with_namespace);
static hx_jnode *parse_unary(parser *p, bool with_filter);
static hx_jnode *parse_postfix(parser *p, hx_jnode *node);
static hx_jnode *parse_filter(parser *p, hx_jnode *node, bool start_inline);

static bool is_tuple_end(parser *p, const char *const *extra_end)
{
    hx_jtoken *t = cur(p);
    if (t->type == HX_JT_VAR_END || t->type == HX_JT_BLOCK_END || t->type == HX_JT_RPAREN)
        return true;
    for (const char *const *e = extra_end; e && *e; e++)
        if (tok_is_name(t, *e)) return true;
    return false;
}

static hx_jnode *parse_list(parser *p)
{
    hx_jnode *n = mk(p, HX_JN_LIST, cur(p));
    nvec items = {0};
    if (!n || !expect(p, HX_JT_LBRACKET)) return NULL;
    while (cur(p)->type != HX_JT_RBRACKET) {
        if (items.n && !expect(p, HX_JT_COMMA)) return NULL;
        if (cur(p)->type == HX_JT_RBRACKET) break;
        hx_jnode *e = parse_expression(p, true);
        if (!e || !nvec_push(p, &items, e)) return NULL;
    }
    if (!expect(p, HX_JT_RBRACKET)) return NULL;
    n->list = to_nodes(items);
    return n;
}

static hx_jnode *parse_dict(parser *p)
{
    hx_jnode *n = mk(p, HX_JN_DICT, cur(p));
    nvec keys = {0}, vals = {0};
    if (!n || !expect(p, HX_JT_LBRACE)) return NULL;
    while (cur(p)->type != HX_JT_RBRACE) {
        if (keys.n && !expect(p, HX_JT_COMMA)) return NULL;
        if (cur(p)->type == HX_JT_RBRACE) break;
        hx_jnode *k = parse_expression(p, true);
        if (!k || !expect(p, HX_JT_COLON)) return NULL;
        hx_jnode *v = parse_expression(p, true);
        if (!v || !nvec_push(p, &keys, k) || !nvec_push(p, &vals, v)) return NULL;
    }
    if (!expect(p, HX_JT_RBRACE)) return NULL;
    n->list = to_nodes(keys);
    n->list2 = to_nodes(vals);
    return n;
}

static hx_jnode *parse_primary(parser *p, bool with_namespace)
{
    hx_jtoken *t = cur(p);
    hx_jnode *n = NULL;
    if (!enter(p)) return NULL;
    switch (t->type) {
    case HX_JT_NAME:
        advance(p);
        if (!strcmp(t->s->s, "true") || !strcmp(t->s->s, "True") || !strcmp(t->s->s, "false") ||
            !strcmp(t->s->s, "False")) {
            if ((n = mk(p, HX_JN_CONST, t))) n->value = hx_jv_bool(t->s->s[0] == 't' ||
                                                                 t->s->s[0] == 'T');
        } else if (!strcmp(t->s->s, "none") || !strcmp(t->s->s, "None")) {
            if ((n = mk(p, HX_JN_CONST, t))) n->value = hx_jv_none();
        } else if (with_namespace && cur(p)->type == HX_JT_DOT) {
            advance(p);
            hx_jtoken *attr = cur(p);
            if (!expect(p, HX_JT_NAME)) break;
            if ((n = mk(p, HX_JN_NSREF, t))) {
                n->name2 = t->s;
                n->name = attr->s;
            }
        } else if ((n = mk(p, HX_JN_NAME, t))) {
            n->name = t->s;
        }
        break;
    case HX_JT_STRING: {
        advance(p);
        hx_jstr *s = t->s;
        if (cur(p)->type == HX_JT_STRING) { /* adjacent literals concatenate */
            hx_jbuf b;
            hx_jbuf_init(&b, p->a, 0);
            hx_jbuf_add(&b, s->s, s->len);
            while (cur(p)->type == HX_JT_STRING) {
                hx_jbuf_add(&b, cur(p)->s->s, cur(p)->s->len);
                advance(p);
            }
            if (b.fail || !(s = hx_jstr_new(p->a, b.p, b.len))) return nomem(p);
        }
        if ((n = mk(p, HX_JN_CONST, t))) n->value = hx_jv_of_str(s);
        break;
    }
    case HX_JT_INT:
        advance(p);
        if ((n = mk(p, HX_JN_CONST, t))) n->value = hx_jv_int(t->i);
        break;
    case HX_JT_FLOAT:
        advance(p);
        if ((n = mk(p, HX_JN_CONST, t))) n->value = hx_jv_float(t->f);
        break;
    case HX_JT_LPAREN:
        advance(p);
        n = parse_tuple(p, false, true, NULL, true, false);
        if (n && !expect(p, HX_JT_RPAREN)) n = NULL;
        break;
    case HX_JT_LBRACKET:
        n = parse_list(p);
        break;
    case HX_JT_LBRACE:
        n = parse_dict(p);
        break;
    default:
        fail(p, t, "unexpected '%s'", describe(t));
    }
    p->depth--;
    return n;
}

static hx_jnode *parse_tuple(parser *p, bool simplified, bool with_condexpr,
                             const char *const *extra_end, bool explicit_parens,
                             bool with_namespace)
{
    hx_jtoken *start = cur(p);
    nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && !expect(p, HX_JT_COMMA)) return NULL;
        if (is_tuple_end(p, extra_end)) break;
        hx_jnode *e = simplified ? parse_primary(p, with_namespace)
                                 : parse_expression(p, with_condexpr);
        if (!e || !nvec_push(p, &args, e)) return NULL;
        if (cur(p)->type == HX_JT_COMMA) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens)
            return fail(p, cur(p), "expected an expression, got '%s'", describe(cur(p)));
    }
    hx_jnode *n = mk(p, HX_JN_TUPLE, start);
    if (n) n->list = to_nodes(args);
    return n;
}

/* Parses `(args, name=value, ...)` into n->list (positional) and n->names/n->list2. */
static bool parse_call_args(parser *p, hx_jnode *n)
{
    nvec args = {0}, kwvals = {0};
    svec kwnames = {0};
    hx_jtoken *open = cur(p);
    if (!expect(p, HX_JT_LPAREN)) return false;
    bool require_comma = false;
    while (cur(p)->type != HX_JT_RPAREN) {
        if (require_comma) {
            if (!expect(p, HX_JT_COMMA)) return false;
            if (cur(p)->type == HX_JT_RPAREN) break;
        }
        if (cur(p)->type == HX_JT_MUL || cur(p)->type == HX_JT_POW) {
            fail(p, cur(p), "*args and **kwargs in calls are not supported");
            return false;
        }
        if (cur(p)->type == HX_JT_NAME && look(p)->type == HX_JT_ASSIGN) {
            hx_jstr *key = cur(p)->s;
            advance(p);
            advance(p);
            hx_jnode *v = parse_expression(p, true);
            if (!v || !svec_push(p, &kwnames, key) || !nvec_push(p, &kwvals, v)) return false;
        } else {
            if (kwnames.n) {
                fail(p, open, "invalid syntax for function call expression");
                return false;
            }
            hx_jnode *v = parse_expression(p, true);
            if (!v || !nvec_push(p, &args, v)) return false;
        }
        require_comma = true;
    }
    if (!expect(p, HX_JT_RPAREN)) return false;
    n->list = to_nodes(args);
    n->list2 = to_nodes(kwvals);
    n->names = kwnames.v;
    n->n_names = kwnames.n;
    return true;
}

static hx_jnode *parse_call(parser *p, hx_jnode *callee)
{
    hx_jnode *n = mk(p, HX_JN_CALL, cur(p));
    if (!n) return NULL;
    n->a = callee;
    n->line = callee->line; /* errors point at what is called, not at its '(' */
    n->col = callee->col;
    return parse_call_args(p, n) ? n : NULL;
}

static hx_jnode *parse_subscribed(parser *p)
{
    hx_jtoken *start = cur(p);
    hx_jnode *args[3] = {NULL, NULL, NULL};
    if (cur(p)->type == HX_JT_COLON) {
        advance(p);
    } else {
        hx_jnode *e = parse_expression(p, true);
        if (!e) return NULL;
        if (cur(p)->type != HX_JT_COLON) return e;
        advance(p);
        args[0] = e;
    }
    if (cur(p)->type != HX_JT_COLON && cur(p)->type != HX_JT_RBRACKET &&
        cur(p)->type != HX_JT_COMMA) {
        if (!(args[1] = parse_expression(p, true))) return NULL;
    }
    if (cur(p)->type == HX_JT_COLON) {
        advance(p);
        if (cur(p)->type != HX_JT_RBRACKET && cur(p)->type != HX_JT_COMMA) {
            if (!(args[2] = parse_expression(p, true))) return NULL;
        }
    }
    hx_jnode *n = mk(p, HX_JN_SLICE, start);
    if (!n) return NULL;
    n->a = args[0];
    n->b = args[1];
    n->c = args[2];
    return n;
}

static hx_jnode *parse_subscript(parser *p, hx_jnode *node)
{
    hx_jtoken *t = advance(p);
    if (t->type == HX_JT_DOT) {
        hx_jtoken *attr = advance(p);
        if (attr->type == HX_JT_NAME) {
            hx_jnode *n = mk(p, HX_JN_GETATTR, t);
            if (!n) return NULL;
            n->a = node;
            n->name = attr->s;
            return n;
        }
        if (attr->type != HX_JT_INT) return fail(p, attr, "expected name or number");
        hx_jnode *k = mk(p, HX_JN_CONST, attr);
        hx_jnode *n = mk(p, HX_JN_GETITEM, t);
        if (!k || !n) return NULL;
        k->value = hx_jv_int(attr->i);
        n->a = node;
        n->b = k;
        return n;
    }
    /* '[' */
    nvec args = {0};
    while (cur(p)->type != HX_JT_RBRACKET) {
        if (args.n && !expect(p, HX_JT_COMMA)) return NULL;
        hx_jnode *e = parse_subscribed(p);
        if (!e || !nvec_push(p, &args, e)) return NULL;
    }
    if (!expect(p, HX_JT_RBRACKET)) return NULL;
    if (args.n == 0) return fail(p, t, "expected subscript expression");
    hx_jnode *n = mk(p, HX_JN_GETITEM, t);
    if (!n) return NULL;
    n->a = node;
    if (args.n == 1) {
        n->b = args.v[0];
    } else {
        hx_jnode *tup = mk(p, HX_JN_TUPLE, t);
        if (!tup) return NULL;
        tup->list = to_nodes(args);
        n->b = tup;
    }
    return n;
}

static hx_jnode *parse_postfix(parser *p, hx_jnode *node)
{
    while (node) {
        int ty = cur(p)->type;
        if (ty == HX_JT_DOT || ty == HX_JT_LBRACKET) node = parse_subscript(p, node);
        else if (ty == HX_JT_LPAREN) node = parse_call(p, node);
        else break;
    }
    return node;
}

/* Reads a filter or test name, dotted parts joined as jinja2 does. */
static hx_jstr *dotted_name(parser *p)
{
    hx_jtoken *t = cur(p);
    if (!expect(p, HX_JT_NAME)) return NULL;
    hx_jstr *name = t->s;
    while (cur(p)->type == HX_JT_DOT) {
        advance(p);
        hx_jtoken *part = cur(p);
        if (!expect(p, HX_JT_NAME)) return NULL;
        hx_jbuf b;
        hx_jbuf_init(&b, p->a, 0);
        hx_jbuf_add(&b, name->s, name->len);
        hx_jbuf_addc(&b, '.');
        hx_jbuf_add(&b, part->s->s, part->s->len);
        if (b.fail || !(name = hx_jstr_new(p->a, b.p, b.len))) return nomem(p);
    }
    return name;
}

static hx_jnode *parse_filter(parser *p, hx_jnode *node, bool start_inline)
{
    while (cur(p)->type == HX_JT_PIPE || start_inline) {
        if (!start_inline) advance(p);
        hx_jtoken *t = cur(p);
        hx_jstr *name = dotted_name(p);
        if (!name) return NULL;
        hx_jnode *n = mk(p, HX_JN_FILTER, t);
        if (!n) return NULL;
        n->a = node;
        n->name = name;
        n->id = hx_jfilter_find(name->s, name->len); /* -1: checked by check_names */
        if (cur(p)->type == HX_JT_LPAREN && !parse_call_args(p, n)) return NULL;
        node = n;
        start_inline = false;
    }
    return node;
}

static hx_jnode *parse_test(parser *p, hx_jnode *node)
{
    hx_jtoken *is = advance(p);
    bool negated = false;
    if (tok_is_name(cur(p), "not")) {
        advance(p);
        negated = true;
    }
    hx_jstr *name = dotted_name(p);
    if (!name) return NULL;
    hx_jnode *n = mk(p, HX_JN_TEST, is);
    if (!n) return NULL;
    n->a = node;
    n->name = name;
    n->id = hx_jtest_find(name->s, name->len); /* -1: checked by check_names */
    int ty = cur(p)->type;
    if (ty == HX_JT_LPAREN) {
        if (!parse_call_args(p, n)) return NULL;
    } else if ((ty == HX_JT_NAME || ty == HX_JT_STRING || ty == HX_JT_INT ||
                ty == HX_JT_FLOAT || ty == HX_JT_LBRACKET || ty == HX_JT_LBRACE) &&
               !tok_is_name(cur(p), "else") && !tok_is_name(cur(p), "or") &&
               !tok_is_name(cur(p), "and")) {
        if (tok_is_name(cur(p), "is")) return fail(p, cur(p), "cannot chain multiple tests");
        hx_jnode *arg = parse_postfix(p, parse_primary(p, false));
        if (!arg) return NULL;
        nvec args = {0};
        if (!nvec_push(p, &args, arg)) return NULL;
        n->list = to_nodes(args);
    }
    if (negated) {
        hx_jnode *no = mk(p, HX_JN_NOT, is);
        if (!no) return NULL;
        no->a = n;
        return no;
    }
    return n;
}

static hx_jnode *parse_filter_expr(parser *p, hx_jnode *node)
{
    while (node) {
        if (cur(p)->type == HX_JT_PIPE) node = parse_filter(p, node, false);
        else if (tok_is_name(cur(p), "is")) node = parse_test(p, node);
        else if (cur(p)->type == HX_JT_LPAREN) node = parse_call(p, node);
        else break;
    }
    return node;
}

static hx_jnode *parse_unary(parser *p, bool with_filter)
{
    hx_jtoken *t = cur(p);
    hx_jnode *node;
    if (!enter(p)) return NULL;
    if (t->type == HX_JT_SUB || t->type == HX_JT_ADD) {
        advance(p);
        node = mk(p, t->type == HX_JT_SUB ? HX_JN_NEG : HX_JN_POS, t);
        if (node && !(node->a = parse_unary(p, false))) node = NULL;
    } else {
        node = parse_primary(p, false);
    }
    node = parse_postfix(p, node);
    if (with_filter) node = parse_filter_expr(p, node);
    p->depth--;
    return node;
}

static hx_jnode *binop(parser *p, int op, const hx_jtoken *at, hx_jnode *l, hx_jnode *r)
{
    if (!l || !r) return NULL;
    hx_jnode *n = mk(p, HX_JN_BINOP, at);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = l;
    n->b = r;
    return n;
}

static hx_jnode *parse_pow(parser *p)
{
    hx_jnode *left = parse_unary(p, true);
    while (left && cur(p)->type == HX_JT_POW) {
        hx_jtoken *t = advance(p);
        left = binop(p, HX_JO_POW, t, left, parse_unary(p, true));
    }
    return left;
}

static hx_jnode *parse_math2(parser *p)
{
    hx_jnode *left = parse_pow(p);
    for (;;) {
        int ty = cur(p)->type, op;
        if (ty == HX_JT_MUL) op = HX_JO_MUL;
        else if (ty == HX_JT_DIV) op = HX_JO_DIV;
        else if (ty == HX_JT_FLOORDIV) op = HX_JO_FLOORDIV;
        else if (ty == HX_JT_MOD) op = HX_JO_MOD;
        else break;
        if (!left) break;
        hx_jtoken *t = advance(p);
        left = binop(p, op, t, left, parse_pow(p));
    }
    return left;
}

static hx_jnode *parse_concat(parser *p)
{
    hx_jtoken *start = cur(p);
    hx_jnode *first = parse_math2(p);
    if (!first || cur(p)->type != HX_JT_TILDE) return first;
    nvec args = {0};
    if (!nvec_push(p, &args, first)) return NULL;
    while (cur(p)->type == HX_JT_TILDE) {
        advance(p);
        hx_jnode *e = parse_math2(p);
        if (!e || !nvec_push(p, &args, e)) return NULL;
    }
    hx_jnode *n = mk(p, HX_JN_CONCAT, start);
    if (n) n->list = to_nodes(args);
    return n;
}

static hx_jnode *parse_math1(parser *p)
{
    hx_jnode *left = parse_concat(p);
    while (left && (cur(p)->type == HX_JT_ADD || cur(p)->type == HX_JT_SUB)) {
        hx_jtoken *t = advance(p);
        left = binop(p, t->type == HX_JT_ADD ? HX_JO_ADD : HX_JO_SUB, t, left, parse_concat(p));
    }
    return left;
}

static hx_jnode *parse_compare(parser *p)
{
    hx_jtoken *start = cur(p);
    hx_jnode *expr = parse_math1(p);
    if (!expr) return NULL;
    nvec operands = {0};
    uint8_t opbuf[64];
    uint8_t *ops = opbuf;
    int cap = (int)sizeof opbuf;
    for (;;) {
        int ty = cur(p)->type, op = -1;
        if (ty == HX_JT_EQ) op = HX_JO_EQ;
        else if (ty == HX_JT_NE) op = HX_JO_NE;
        else if (ty == HX_JT_LT) op = HX_JO_LT;
        else if (ty == HX_JT_LTEQ) op = HX_JO_LE;
        else if (ty == HX_JT_GT) op = HX_JO_GT;
        else if (ty == HX_JT_GTEQ) op = HX_JO_GE;
        if (op >= 0) {
            advance(p);
        } else if (tok_is_name(cur(p), "in")) {
            advance(p);
            op = HX_JO_IN;
        } else if (tok_is_name(cur(p), "not") && tok_is_name(look(p), "in")) {
            advance(p);
            advance(p);
            op = HX_JO_NOTIN;
        } else {
            break;
        }
        if (operands.n == cap) {
            uint8_t *grown = hx_jarena_alloc(p->a, (size_t)cap * 2);
            if (!grown) return nomem(p);
            memcpy(grown, ops, (size_t)cap);
            ops = grown;
            cap *= 2;
        }
        ops[operands.n] = (uint8_t)op;
        hx_jnode *e = parse_math1(p);
        if (!e || !nvec_push(p, &operands, e)) return NULL;
    }
    if (operands.n == 0) return expr;
    hx_jnode *n = mk(p, HX_JN_COMPARE, start);
    if (!n || !(n->ops = hx_jarena_alloc(p->a, (size_t)operands.n))) return nomem(p);
    memcpy(n->ops, ops, (size_t)operands.n);
    n->a = expr;
    n->list = to_nodes(operands);
    return n;
}

static hx_jnode *parse_not(parser *p)
{
    if (tok_is_name(cur(p), "not")) {
        hx_jtoken *t = advance(p);
        if (!enter(p)) return NULL;
        hx_jnode *n = mk(p, HX_JN_NOT, t);
        if (n && !(n->a = parse_not(p))) n = NULL;
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static hx_jnode *parse_and(parser *p)
{
    hx_jnode *left = parse_not(p);
    while (left && tok_is_name(cur(p), "and")) {
        hx_jtoken *t = advance(p);
        hx_jnode *right = parse_not(p);
        hx_jnode *n = right ? mk(p, HX_JN_AND, t) : NULL;
        if (!n) return NULL;
        n->a = left;
        n->b = right;
        left = n;
    }
    return left;
}

static hx_jnode *parse_or(parser *p)
{
    hx_jnode *left = parse_and(p);
    while (left && tok_is_name(cur(p), "or")) {
        hx_jtoken *t = advance(p);
        hx_jnode *right = parse_and(p);
        hx_jnode *n = right ? mk(p, HX_JN_OR, t) : NULL;
        if (!n) return NULL;
        n->a = left;
        n->b = right;
        left = n;
    }
    return left;
}

static hx_jnode *parse_condexpr(parser *p)
{
    hx_jtoken *start = cur(p);
    hx_jnode *expr1 = parse_or(p);
    if (!enter(p)) return NULL;
    while (expr1 && tok_is_name(cur(p), "if")) {
        advance(p);
        hx_jnode *n = mk(p, HX_JN_COND, start);
        if (!n || !(n->a = parse_or(p))) {
            expr1 = NULL;
            break;
        }
        n->b = expr1;
        if (tok_is_name(cur(p), "else")) {
            advance(p);
            if (!(n->c = parse_condexpr(p))) {
                expr1 = NULL;
                break;
            }
        }
        expr1 = n;
        start = cur(p);
    }
    p->depth--;
    return expr1;
}

static hx_jnode *parse_expression(parser *p, bool with_condexpr)
{
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

/* ---- statements ---- */

static bool subparse(parser *p, const char *const *end_tokens, hx_jnodes *out);

/* Skips an optional colon, expects the block end, parses the body up to one of end_tokens. */
static bool parse_statements(parser *p, const char *const *end_tokens, bool drop_needle,
                             hx_jnodes *out)
{
    if (cur(p)->type == HX_JT_COLON) advance(p);
    if (!expect(p, HX_JT_BLOCK_END)) return false;
    if (!subparse(p, end_tokens, out)) return false;
    if (cur(p)->type == HX_JT_EOF) {
        char want[128] = "";
        for (const char *const *e = end_tokens; *e; e++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'",
                     e == end_tokens ? "" : " or ", *e);
        fail(p, cur(p), "unexpected end of template, expected %s", want);
        return false;
    }
    if (drop_needle) advance(p);
    return true;
}

static bool can_assign(const hx_jnode *n)
{
    if (n->kind == HX_JN_NAME || n->kind == HX_JN_NSREF) return true;
    if (n->kind != HX_JN_TUPLE) return false;
    for (int32_t i = 0; i < n->list.n; i++)
        if (!can_assign(n->list.v[i]) || n->list.v[i]->kind == HX_JN_NSREF) return false;
    return true;
}

static hx_jnode *parse_assign_target(parser *p, const char *const *extra_end,
                                     bool with_namespace)
{
    hx_jtoken *t = cur(p);
    hx_jnode *target = parse_tuple(p, true, true, extra_end, false, with_namespace);
    if (!target) return NULL;
    if (!can_assign(target)) return fail(p, t, "can't assign to this expression");
    return target;
}

static hx_jnode *parse_for(parser *p)
{
    static const char *const in_end[] = {"in", NULL};
    static const char *const rec_end[] = {"recursive", NULL};
    static const char *const body_end[] = {"endfor", "else", NULL};
    static const char *const else_end[] = {"endfor", NULL};
    hx_jnode *n = mk(p, HX_JN_FOR, advance(p));
    if (!n || !(n->a = parse_assign_target(p, in_end, false))) return NULL;
    if (!expect_name(p, "in")) return NULL;
    if (!(n->b = parse_tuple(p, false, false, rec_end, false, false))) return NULL;
    if (tok_is_name(cur(p), "if")) {
        advance(p);
        if (!(n->c = parse_expression(p, true))) return NULL;
    }
    if (tok_is_name(cur(p), "recursive")) {
        advance(p);
        n->op = 1;
    }
    if (!parse_statements(p, body_end, false, &n->list)) return NULL;
    if (tok_is_name(advance(p), "else") && !parse_statements(p, else_end, true, &n->list2))
        return NULL;
    return n;
}

static hx_jnode *parse_if(parser *p)
{
    static const char *const body_end[] = {"elif", "else", "endif", NULL};
    static const char *const else_end[] = {"endif", NULL};
    hx_jnode *result = mk(p, HX_JN_IF, advance(p));
    hx_jnode *node = result;
    while (node) {
        if (!(node->a = parse_tuple(p, false, false, NULL, false, false))) return NULL;
        if (!parse_statements(p, body_end, false, &node->list)) return NULL;
        hx_jtoken *t = advance(p);
        if (tok_is_name(t, "elif")) {
            /* elif chains become an if nested in the else branch: the same evaluation. */
            hx_jnode *next = mk(p, HX_JN_IF, t);
            nvec one = {0};
            if (!next || !nvec_push(p, &one, next)) return NULL;
            node->list2 = to_nodes(one);
            node = next;
            continue;
        }
        if (tok_is_name(t, "else") && !parse_statements(p, else_end, true, &node->list2))
            return NULL;
        break;
    }
    return result;
}

/* Parses `(a, b=default, ...)` into n->names and n->list2 (a default per parameter, or NULL). */
static bool parse_signature(parser *p, hx_jnode *n)
{
    svec names = {0};
    nvec defaults = {0};
    bool any_default = false;
    if (!expect(p, HX_JT_LPAREN)) return false;
    while (cur(p)->type != HX_JT_RPAREN) {
        if (names.n && !expect(p, HX_JT_COMMA)) return false;
        hx_jtoken *t = cur(p);
        if (!expect(p, HX_JT_NAME)) return false;
        hx_jnode *def = NULL;
        if (cur(p)->type == HX_JT_ASSIGN) {
            advance(p);
            if (!(def = parse_expression(p, true))) return false;
            any_default = true;
        } else if (any_default) {
            fail(p, t, "non-default argument follows default argument");
            return false;
        }
        if (!svec_push(p, &names, t->s) || !nvec_push(p, &defaults, def)) return false;
    }
    if (!expect(p, HX_JT_RPAREN)) return false;
    n->names = names.v;
    n->n_names = names.n;
    n->list2 = to_nodes(defaults);
    return true;
}

/* Sets the macro flags from the names its body reads (jinja2's find_undeclared). */
static void scan_names(const hx_jnode *n, uint8_t *flags)
{
    if (!n) return;
    if (n->kind == HX_JN_NAME) {
        if (hx_jstr_eq(n->name, "caller", 6)) *flags |= HX_JM_CALLER;
        else if (hx_jstr_eq(n->name, "varargs", 7)) *flags |= HX_JM_VARARGS;
        else if (hx_jstr_eq(n->name, "kwargs", 6)) *flags |= HX_JM_KWARGS;
        return;
    }
    if (n->kind == HX_JN_MACRO) return;
    scan_names(n->a, flags);
    scan_names(n->b, flags);
    scan_names(n->c, flags);
    for (int32_t i = 0; i < n->list.n; i++) scan_names(n->list.v[i], flags);
    for (int32_t i = 0; i < n->list2.n; i++) scan_names(n->list2.v[i], flags);
}

static hx_jnode *parse_macro(parser *p)
{
    static const char *const end[] = {"endmacro", NULL};
    hx_jnode *n = mk(p, HX_JN_MACRO, advance(p));
    if (!n) return NULL;
    hx_jtoken *t = cur(p);
    if (!expect(p, HX_JT_NAME)) return NULL;
    n->name = t->s;
    if (!parse_signature(p, n) || !parse_statements(p, end, true, &n->list)) return NULL;
    uint8_t flags = 0;
    for (int32_t i = 0; i < n->list.n; i++) scan_names(n->list.v[i], &flags);
    for (int32_t i = 0; i < n->n_names; i++) /* a declared "caller" parameter is not special */
        if (hx_jstr_eq(n->names[i], "caller", 6)) flags &= (uint8_t)~HX_JM_CALLER;
    n->op = flags;
    return n;
}

static hx_jnode *parse_call_block(parser *p)
{
    static const char *const end[] = {"endcall", NULL};
    hx_jtoken *t = advance(p);
    hx_jnode *n = mk(p, HX_JN_CALL_BLOCK, t);
    if (!n) return NULL;
    if (cur(p)->type == HX_JT_LPAREN && !parse_signature(p, n)) return NULL;
    if (!(n->a = parse_expression(p, true))) return NULL;
    if (n->a->kind != HX_JN_CALL) return fail(p, t, "expected call");
    if (!parse_statements(p, end, true, &n->list)) return NULL;
    uint8_t flags = 0;
    for (int32_t i = 0; i < n->list.n; i++) scan_names(n->list.v[i], &flags);
    n->op = flags;
    return n;
}

static hx_jnode *parse_set(parser *p)
{
    static const char *const end[] = {"endset", NULL};
    hx_jtoken *t = advance(p);
    hx_jnode *target = parse_assign_target(p, NULL, true);
    if (!target) return NULL;
    if (cur(p)->type == HX_JT_ASSIGN) {
        advance(p);
        hx_jnode *n = mk(p, HX_JN_SET, t);
        if (!n) return NULL;
        n->a = target;
        if (!(n->b = parse_tuple(p, false, true, NULL, false, false))) return NULL;
        return n;
    }
    hx_jnode *n = mk(p, HX_JN_SET_BLOCK, t);
    if (!n) return NULL;
    n->a = target;
    if (cur(p)->type == HX_JT_PIPE && !(n->b = parse_filter(p, NULL, false))) return NULL;
    if (!parse_statements(p, end, true, &n->list)) return NULL;
    return n;
}

static hx_jnode *parse_with(parser *p)
{
    static const char *const end[] = {"endwith", NULL};
    hx_jnode *n = mk(p, HX_JN_WITH, advance(p));
    nvec targets = {0}, values = {0};
    if (!n) return NULL;
    while (cur(p)->type != HX_JT_BLOCK_END) {
        if (targets.n && !expect(p, HX_JT_COMMA)) return NULL;
        hx_jnode *target = parse_assign_target(p, NULL, false);
        if (!target || !expect(p, HX_JT_ASSIGN)) return NULL;
        hx_jnode *v = parse_expression(p, true);
        if (!v || !nvec_push(p, &targets, target) || !nvec_push(p, &values, v)) return NULL;
    }
    n->list2 = to_nodes(values);
    /* targets ride in `a` as a tuple node so assignment code can be shared */
    hx_jnode *tup = mk(p, HX_JN_TUPLE, cur(p));
    if (!tup) return NULL;
    tup->list = to_nodes(targets);
    n->a = tup;
    if (!parse_statements(p, end, true, &n->list)) return NULL;
    return n;
}

static hx_jnode *parse_statement(parser *p, nvec *body)
{
    hx_jtoken *t = cur(p);
    if (t->type != HX_JT_NAME) return fail(p, t, "tag name expected");
    const char *w = t->s->s;
    if (!strcmp(w, "for")) return parse_for(p);
    if (!strcmp(w, "if")) return parse_if(p);
    if (!strcmp(w, "set")) return parse_set(p);
    if (!strcmp(w, "macro")) return parse_macro(p);
    if (!strcmp(w, "call")) return parse_call_block(p);
    if (!strcmp(w, "with")) return parse_with(p);
    if (!strcmp(w, "filter")) {
        static const char *const end[] = {"endfilter", NULL};
        hx_jnode *n = mk(p, HX_JN_FILTER_BLOCK, advance(p));
        if (!n || !(n->b = parse_filter(p, NULL, true))) return NULL;
        return parse_statements(p, end, true, &n->list) ? n : NULL;
    }
    if (!strcmp(w, "generation")) {
        static const char *const end[] = {"endgeneration", NULL};
        hx_jnode *n = mk(p, HX_JN_SCOPE, advance(p));
        return n && parse_statements(p, end, true, &n->list) ? n : NULL;
    }
    if (!strcmp(w, "break") || !strcmp(w, "continue")) {
        advance(p);
        return mk(p, w[0] == 'b' ? HX_JN_BREAK : HX_JN_CONTINUE, t);
    }
    if (!strcmp(w, "print")) {
        advance(p);
        hx_jnode *last = NULL;
        while (cur(p)->type != HX_JT_BLOCK_END) {
            if (last && !expect(p, HX_JT_COMMA)) return NULL;
            hx_jnode *n = mk(p, HX_JN_OUTPUT, cur(p));
            if (!n || !(n->a = parse_expression(p, true))) return NULL;
            if (last && !nvec_push(p, body, last)) return NULL;
            last = n;
        }
        return last ? last : mk(p, HX_JN_SCOPE, t); /* an empty print prints nothing */
    }
    if (!strcmp(w, "block") || !strcmp(w, "extends") || !strcmp(w, "include") ||
        !strcmp(w, "import") || !strcmp(w, "from") || !strcmp(w, "autoescape"))
        return fail(p, t, "the '%s' tag is not supported in chat templates", w);
    return fail(p, t, "encountered unknown tag '%s'", w);
}

static bool subparse(parser *p, const char *const *end_tokens, hx_jnodes *out)
{
    nvec body = {0};
    if (!enter(p)) return false;
    while (cur(p)->type != HX_JT_EOF) {
        hx_jtoken *t = cur(p);
        if (t->type == HX_JT_DATA) {
            hx_jnode *n = mk(p, HX_JN_TEXT, t);
            if (!n) return false;
            n->value = hx_jv_of_str(t->s);
            if (!nvec_push(p, &body, n)) return false;
            advance(p);
        } else if (t->type == HX_JT_VAR_BEGIN) {
            advance(p);
            hx_jnode *n = mk(p, HX_JN_OUTPUT, t);
            if (!n || !(n->a = parse_tuple(p, false, true, NULL, false, false))) return false;
            if (!expect(p, HX_JT_VAR_END) || !nvec_push(p, &body, n)) return false;
        } else if (t->type == HX_JT_BLOCK_BEGIN) {
            advance(p);
            for (const char *const *e = end_tokens; e && *e; e++)
                if (tok_is_name(cur(p), *e)) {
                    *out = to_nodes(body);
                    p->depth--;
                    return true;
                }
            hx_jnode *n = parse_statement(p, &body);
            if (!n || !nvec_push(p, &body, n)) return false;
            if (!expect(p, HX_JT_BLOCK_END)) return false;
        } else {
            fail(p, t, "unexpected '%s'", describe(t));
            return false;
        }
    }
    *out = to_nodes(body);
    p->depth--;
    return true;
}

/* ---- unknown filters and tests ----
 *
 * jinja2 rejects an unknown filter or test when it compiles the template, except where it sits
 * directly under an if statement or an inline if (a "soft" frame): there the error waits until
 * the filter is actually called, so a template may guard an optional filter. Loops, macros and
 * blocks open inner frames that are not soft again. The evaluator raises for id -1 at runtime. */

static bool check_names(parser *p, const hx_jnode *n, bool soft);

static bool check_list(parser *p, hx_jnodes l, bool soft)
{
    for (int32_t i = 0; i < l.n; i++)
        if (!check_names(p, l.v[i], soft)) return false;
    return true;
}

static bool check_names(parser *p, const hx_jnode *n, bool soft)
{
    if (!n) return true;
    switch (n->kind) {
    case HX_JN_FILTER:
    case HX_JN_TEST:
        if (n->id < 0 && !soft) {
            hx_jtoken at = {0};
            at.line = n->line;
            at.col = n->col;
            fail(p, &at, "no %s named '%s'", n->kind == HX_JN_FILTER ? "filter" : "test",
                 n->name->s);
            return false;
        }
        return check_names(p, n->a, soft) && check_list(p, n->list, soft) &&
               check_list(p, n->list2, soft);
    case HX_JN_IF:
    case HX_JN_COND:
        return check_names(p, n->a, true) && check_names(p, n->b, true) &&
               check_names(p, n->c, true) && check_list(p, n->list, true) &&
               check_list(p, n->list2, true);
    case HX_JN_FOR:
        return check_names(p, n->b, soft) && check_names(p, n->c, false) &&
               check_list(p, n->list, false) && check_list(p, n->list2, false);
    case HX_JN_CALL_BLOCK:
        return check_names(p, n->a, soft) && check_list(p, n->list, false) &&
               check_list(p, n->list2, false);
    case HX_JN_WITH:
        return check_list(p, n->list2, soft) && check_list(p, n->list, false);
    case HX_JN_MACRO:
    case HX_JN_FILTER_BLOCK:
    case HX_JN_SET_BLOCK:
    case HX_JN_SCOPE:
        return check_names(p, n->b, false) && check_list(p, n->list, false) &&
               check_list(p, n->list2, false);
    default:
        return check_names(p, n->a, soft) && check_names(p, n->b, soft) &&
               check_names(p, n->c, soft) && check_list(p, n->list, soft) &&
               check_list(p, n->list2, soft);
    }
}

/* ---- compile entry ---- */

hx_status hx_template_compile(const char *src, size_t len, hx_template **out, hx_err *err)
{
    hx_status st;
    hx_template *t = hx_calloc(1, sizeof *t);
    if (!t) return hx_err_set(err, HX_E_NOMEM, "out of memory compiling a template");
    parser p;
    memset(&p, 0, sizeof p);
    p.a = &t->arena;
    p.err = err;
    st = hx_jlex(&t->arena, src ? src : "", src ? len : 0, &p.t, &p.n, err);
    if (st != HX_OK) goto fail;
    if (!subparse(&p, NULL, &t->body) || !check_list(&p, t->body, false)) {
        st = p.status != HX_OK ? p.status : HX_E_INVALID;
        goto fail;
    }
    *out = t;
    return HX_OK;
fail:
    hx_template_free(t);
    return st;
}

void hx_template_free(hx_template *t)
{
    if (!t) return;
    hx_jarena_free(&t->arena);
    hx_free(t);
}
