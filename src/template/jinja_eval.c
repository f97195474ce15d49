/* jinja_eval.c - walks a compiled template's AST against a context and produces text.
 *
 * Scoping follows what jinja2's compiler produces: `if` shares its scope; every for-loop
 * iteration, macro call, call/filter/set block, generation block and with block gets a fresh
 * child scope, so assignments inside them do not leak out (and a loop body starts each iteration
 * from the enclosing values); macros see their defining scope as it is when they are called.
 * Name lookup goes scopes -> context variables -> globals. Attribute and item access use
 * jinja2's sandbox fallbacks (getattr then item, item then attribute), Undefined behaves like
 * jinja2's default Undefined, and the immutable sandbox's refusals (list.append, ...) are kept.
 * All work is charged to the step budget and nesting to the depth budget (hx_template_limits).
 * Functions return 0 on success and -1 on failure (statements also 1/2 for break/continue). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "template/jinja_int.h"

#define EXEC_BREAK 1
#define EXEC_CONTINUE 2
#define MAX_STACK 3000 /* nested evaluations, whatever their kind: bounds C stack use */

struct hx_jscope {
    hx_jscope  *parent;
    hx_jstr   **names;
    hx_jv      *vals;
    int32_t     n, cap;
};

static int eval(hx_jrender *r, hx_jscope *sc, const hx_jnode *n, hx_jv *out);
static int exec_body(hx_jrender *r, hx_jscope *sc, hx_jnodes body, hx_jbuf *out);

/* ---- limits ---- */

int hx_jstep(hx_jrender *r, int64_t n)
{
    r->steps += n;
    if (r->steps > r->lim.max_steps)
        return hx_jfail(r, "the template took more than %lld steps", (long long)r->lim.max_steps);
    return 0;
}

/* ---- scopes ---- */

static hx_jscope *scope_new(hx_jrender *r, hx_jscope *parent)
{
    hx_jscope *s = hx_jalloc(r, sizeof *s);
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

static int scope_set(hx_jrender *r, hx_jscope *s, hx_jstr *name, hx_jv v)
{
    for (int32_t i = 0; i < s->n; i++)
        if (s->names[i] == name || hx_jstr_eq(s->names[i], name->s, name->len)) {
            s->vals[i] = v;
            return 0;
        }
    if (s->n == s->cap) {
        int32_t cap = s->cap ? s->cap * 2 : 8;
        hx_jstr **nn = hx_jalloc(r, (size_t)cap * sizeof *nn);
        hx_jv *nv = hx_jalloc(r, (size_t)cap * sizeof *nv);
        if (!nn || !nv) return -1;
        if (s->n) {
            memcpy(nn, s->names, (size_t)s->n * sizeof *nn);
            memcpy(nv, s->vals, (size_t)s->n * sizeof *nv);
        }
        s->names = nn;
        s->vals = nv;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
    return 0;
}

static int scope_set_c(hx_jrender *r, hx_jscope *s, const char *name, hx_jv v)
{
    hx_jstr *k = hx_jstr_make(r, name, strlen(name));
    return k ? scope_set(r, s, k, v) : -1;
}

static bool lookup(hx_jrender *r, hx_jscope *s, const hx_jstr *name, hx_jv *out)
{
    for (; s; s = s->parent)
        for (int32_t i = s->n - 1; i >= 0; i--)
            if (s->names[i] == name || hx_jstr_eq(s->names[i], name->s, name->len)) {
                *out = s->vals[i];
                return true;
            }
    hx_jv *v = hx_jdict_get_str(r->ctx, name->s, name->len);
    if (v) {
        *out = *v;
        return true;
    }
    int g = hx_jglobal_find(name->s, name->len);
    if (g >= 0) {
        hx_jfunc *fn = hx_jalloc(r, sizeof *fn);
        if (!fn) return false;
        memset(fn, 0, sizeof *fn);
        fn->kind = HX_JF_BUILTIN;
        fn->id = g;
        memset(out, 0, sizeof *out);
        out->type = HX_JV_FUNC;
        out->u.fn = fn;
        return true;
    }
    return false;
}

/* ---- attribute and item access ---- */

static int make_method(hx_jrender *r, hx_jv self, int id, hx_jv *out)
{
    hx_jfunc *fn = hx_jalloc(r, sizeof *fn);
    if (!fn) return -1;
    memset(fn, 0, sizeof *fn);
    fn->kind = HX_JF_METHOD;
    fn->id = id;
    fn->self = self;
    memset(out, 0, sizeof *out);
    out->type = HX_JV_FUNC;
    out->u.fn = fn;
    return 0;
}

/* getattr(obj, name) as Python would see it: methods, namespace and loop attributes. Returns 1
 * when found, 0 when the object has no such attribute, -1 on failure. */
static int py_getattr(hx_jrender *r, hx_jv obj, const hx_jstr *name, hx_jv *out)
{
    if (obj.type == HX_JV_NS) {
        hx_jv *v = hx_jdict_get_str(obj.u.d, name->s, name->len);
        if (!v) return 0;
        *out = *v;
        return 1;
    }
    if (obj.type == HX_JV_LOOP) {
        hx_jloop *lp = obj.u.loop;
        int64_t len = (int64_t)lp->items->n, i = lp->index0;
        const char *s = name->s;
        if (!strcmp(s, "index")) *out = hx_jv_int(i + 1);
        else if (!strcmp(s, "index0")) *out = hx_jv_int(i);
        else if (!strcmp(s, "revindex")) *out = hx_jv_int(len - i);
        else if (!strcmp(s, "revindex0")) *out = hx_jv_int(len - i - 1);
        else if (!strcmp(s, "first")) *out = hx_jv_bool(i == 0);
        else if (!strcmp(s, "last")) *out = hx_jv_bool(i == len - 1);
        else if (!strcmp(s, "length")) *out = hx_jv_int(len);
        else if (!strcmp(s, "depth")) *out = hx_jv_int(1);
        else if (!strcmp(s, "depth0")) *out = hx_jv_int(0);
        else if (!strcmp(s, "previtem"))
            *out = i > 0 ? lp->items->v[i - 1]
                         : hx_jv_undef_named(HX_JU_HINT, NULL, 0);
        else if (!strcmp(s, "nextitem"))
            *out = i + 1 < len ? lp->items->v[i + 1]
                               : hx_jv_undef_named(HX_JU_HINT, NULL, 0);
        else if (!strcmp(s, "cycle") || !strcmp(s, "changed")) {
            hx_jfunc *fn = hx_jalloc(r, sizeof *fn);
            if (!fn) return -1;
            memset(fn, 0, sizeof *fn);
            fn->kind = HX_JF_LOOP_METHOD;
            fn->id = s[1] == 'y' ? 0 : 1;
            fn->loop = lp;
            memset(out, 0, sizeof *out);
            out->type = HX_JV_FUNC;
            out->u.fn = fn;
        } else return 0;
        return 1;
    }
    bool unsafe = false;
    int id = hx_jmethod_find(obj, name->s, name->len, &unsafe);
    if (id < 0) return 0;
    if (unsafe) {
        *out = hx_jv_undef_named(HX_JU_UNSAFE, name, obj.type);
        return 1;
    }
    return make_method(r, obj, id, out) < 0 ? -1 : 1;
}

int hx_jgetattr(hx_jrender *r, hx_jv obj, const hx_jstr *name, hx_jv *out)
{
    if (obj.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, obj);
    int found = py_getattr(r, obj, name, out);
    if (found < 0) return -1;
    if (found) return 0;
    if (obj.type == HX_JV_DICT) {
        if (obj.u.d->n > 16 && hx_jstep(r, (int64_t)obj.u.d->n / 16) < 0) return -1;
        hx_jv *v = hx_jdict_get_str(obj.u.d, name->s, name->len);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    *out = hx_jv_undef_named(HX_JU_ATTR, name, obj.type);
    return 0;
}

/* Python index normalisation: -1 is the last; false when out of range. */
static bool norm_index(int64_t i, int64_t len, int64_t *out)
{
    if (i < 0) i += len;
    if (i < 0 || i >= len) return false;
    *out = i;
    return true;
}

/* Byte offset of code point k in s (k <= code point count). */
static size_t cp_offset(const hx_jstr *s, int64_t k)
{
    size_t i = 0;
    for (int64_t c = 0; c < k && i < s->len; c++) hx_ju_next(s->s, s->len, &i);
    return i;
}

int hx_jgetitem(hx_jrender *r, hx_jv obj, hx_jv key, hx_jv *out)
{
    if (obj.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, obj);
    bool int_key = key.type == HX_JV_INT || key.type == HX_JV_BOOL;
    int64_t ki = key.type == HX_JV_BOOL ? (int64_t)key.u.b : key.u.i;
    switch (obj.type) {
    case HX_JV_DICT: {
        if (obj.u.d->n > 16 && hx_jstep(r, (int64_t)obj.u.d->n / 16) < 0) return -1;
        hx_jv *v = hx_jdict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
        break;
    }
    case HX_JV_LIST:
    case HX_JV_TUPLE: {
        int64_t i;
        if (int_key) {
            if (norm_index(ki, (int64_t)obj.u.l->n, &i)) {
                *out = obj.u.l->v[i];
                return 0;
            }
            *out = hx_jv_undef_named(HX_JU_HINT, NULL, 0);
            return 0;
        }
        break;
    }
    case HX_JV_STR: {
        int64_t i;
        if (int_key) {
            int64_t len = (int64_t)hx_ju_len(obj.u.s->s, obj.u.s->len);
            if (norm_index(ki, len, &i)) {
                size_t b = cp_offset(obj.u.s, i), e = b;
                hx_ju_next(obj.u.s->s, obj.u.s->len, &e);
                if (hx_jv_make_str(r, obj.u.s->s + b, e - b, out) < 0) return -1;
                out->flag = obj.flag;
                return 0;
            }
            *out = hx_jv_undef_named(HX_JU_HINT, NULL, 0);
            return 0;
        }
        break;
    }
    default:
        break;
    }
    /* The item lookup failed: a string key falls back to an attribute. */
    if (key.type == HX_JV_STR) {
        int found = py_getattr(r, obj, key.u.s, out);
        if (found < 0) return -1;
        if (found) return 0;
        *out = hx_jv_undef_named(HX_JU_ATTR, key.u.s, obj.type);
        return 0;
    }
    *out = hx_jv_undef_named(HX_JU_HINT, NULL, 0);
    return 0;
}

/* Python slice indices for a sequence of length len (slice.indices). */
static int slice_indices(hx_jrender *r, hx_jv vs, hx_jv ve, hx_jv vst, int64_t len,
                         int64_t *start, int64_t *stop, int64_t *step)
{
    hx_jv vv[3] = {vs, ve, vst};
    for (int k = 0; k < 3; k++)
        if (vv[k].type != HX_JV_NONE && vv[k].type != HX_JV_INT && vv[k].type != HX_JV_BOOL)
            return hx_jfail(r, "slice indices must be integers or None");
    *step = vst.type == HX_JV_NONE ? 1 : vst.type == HX_JV_BOOL ? vst.u.b : vst.u.i;
    if (*step == 0) return hx_jfail(r, "slice step cannot be zero");
    int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? len - 1 : len;
    for (int k = 0; k < 2; k++) {
        hx_jv v = k ? ve : vs;
        int64_t *dst = k ? stop : start;
        if (v.type == HX_JV_NONE) {
            *dst = (*step < 0) == (k == 0) ? hi : lo;
            continue;
        }
        int64_t x = v.type == HX_JV_BOOL ? v.u.b : v.u.i;
        if (x < 0) {
            x += len;
            if (x < lo) x = lo;
        } else if (x > hi) {
            x = hi;
        }
        *dst = x;
    }
    return 0;
}

static int do_slice(hx_jrender *r, hx_jv obj, hx_jv vs, hx_jv ve, hx_jv vst, hx_jv *out)
{
    if (obj.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, obj);
    int64_t start, stop, step;
    if (hx_jv_is_list(obj)) {
        if (slice_indices(r, vs, ve, vst, (int64_t)obj.u.l->n, &start, &stop, &step) < 0)
            return -1;
        hx_jlist *l = hx_jlist_new(r, 0);
        if (!l) return -1;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            if (hx_jlist_push(r, l, obj.u.l->v[i]) < 0) return -1;
        *out = hx_jv_of_list(l, (hx_jtype)obj.type);
        return 0;
    }
    if (obj.type == HX_JV_STR) {
        const hx_jstr *s = obj.u.s;
        int64_t len = (int64_t)hx_ju_len(s->s, s->len);
        if (slice_indices(r, vs, ve, vst, len, &start, &stop, &step) < 0) return -1;
        hx_jbuf b;
        hx_jbuf_init(&b, &r->arena, 0);
        if (step == 1) {
            if (stop > start) {
                size_t bs = cp_offset(s, start), be = cp_offset(s, stop);
                hx_jbuf_add(&b, s->s + bs, be - bs);
            }
        } else {
            /* Offsets of every code point, then pick. */
            size_t *offs = hx_jalloc(r, (size_t)(len + 1) * sizeof *offs);
            if (!offs) return -1;
            size_t i = 0;
            for (int64_t c = 0; c < len; c++) {
                offs[c] = i;
                hx_ju_next(s->s, s->len, &i);
            }
            offs[len] = s->len;
            for (int64_t c = start; step > 0 ? c < stop : c > stop; c += step)
                hx_jbuf_add(&b, s->s + offs[c], offs[c + 1] - offs[c]);
        }
        if (hx_jbuf_check(r, &b) < 0) return -1;
        if (hx_jv_make_str(r, b.p ? b.p : "", b.len, out) < 0) return -1;
        out->flag = obj.flag;
        return 0;
    }
    *out = hx_jv_undef_named(HX_JU_HINT, NULL, 0);
    return 0;
}

/* ---- arithmetic ---- */

static bool as_num(hx_jv v, bool *is_float, int64_t *i, double *f)
{
    switch (v.type) {
    case HX_JV_BOOL: *is_float = false; *i = v.u.b; *f = v.u.b; return true;
    case HX_JV_INT: *is_float = false; *i = v.u.i; *f = (double)v.u.i; return true;
    case HX_JV_FLOAT: *is_float = true; *f = v.u.f; return true;
    default: return false;
    }
}

static const char *op_text(int op)
{
    static const char *t[] = {"+", "-", "*", "/", "//", "%", "**"};
    return op >= 0 && op < 7 ? t[op] : "?";
}

static int type_error(hx_jrender *r, int op, hx_jv a, hx_jv b)
{
    return hx_jfail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
                    hx_jv_type_name(a), hx_jv_type_name(b));
}

static int repeat(hx_jrender *r, hx_jv seq, int64_t times, hx_jv *out)
{
    if (times < 0) times = 0;
    if (seq.type == HX_JV_STR) {
        if (times && seq.u.s->len > r->lim.max_output_bytes / (uint64_t)times)
            return hx_jfail(r, "string repetition too large");
        hx_jbuf b;
        hx_jbuf_init(&b, &r->arena, 0);
        for (int64_t k = 0; k < times; k++) hx_jbuf_add(&b, seq.u.s->s, seq.u.s->len);
        if (hx_jbuf_check(r, &b) < 0 || hx_jv_make_str(r, b.p ? b.p : "", b.len, out) < 0)
            return -1;
        out->flag = seq.flag;
        return 0;
    }
    size_t n = seq.u.l->n;
    if (times && n > (size_t)(r->lim.max_output_bytes / 16) / (uint64_t)times)
        return hx_jfail(r, "list repetition too large");
    if (hx_jstep(r, (int64_t)n * times) < 0) return -1;
    hx_jlist *l = hx_jlist_new(r, n * (size_t)times);
    if (!l) return -1;
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < n; i++) l->v[l->n++] = seq.u.l->v[i];
    *out = hx_jv_of_list(l, (hx_jtype)seq.type);
    return 0;
}

static double py_fmod(double a, double b, double *div)
{
    double mod = fmod(a, b);
    double d = (a - mod) / b;
    if (mod != 0) {
        if ((b < 0) != (mod < 0)) {
            mod += b;
            d -= 1.0;
        }
    } else {
        mod = copysign(0.0, b);
    }
    if (d != 0) {
        double fl = floor(d);
        if (d - fl > 0.5) fl += 1.0;
        d = fl;
    } else {
        d = copysign(0.0, a / b);
    }
    *div = d;
    return mod;
}

static int binop(hx_jrender *r, int op, hx_jv a, hx_jv b, hx_jv *out)
{
    if (a.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, a);
    if (b.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, b);
    bool af = false, bf = false;
    int64_t ai = 0, bi = 0;
    double ad = 0, bd = 0;
    bool an = as_num(a, &af, &ai, &ad), bn = as_num(b, &bf, &bi, &bd);
    if (an && bn) {
        bool fl = af || bf || op == HX_JO_DIV;
        if (op == HX_JO_POW && !fl && bi < 0) fl = true;
        if (!fl) {
            int64_t res;
            switch (op) {
            case HX_JO_ADD:
                if (__builtin_add_overflow(ai, bi, &res)) goto overflow;
                break;
            case HX_JO_SUB:
                if (__builtin_sub_overflow(ai, bi, &res)) goto overflow;
                break;
            case HX_JO_MUL:
                if (__builtin_mul_overflow(ai, bi, &res)) goto overflow;
                break;
            case HX_JO_FLOORDIV:
            case HX_JO_MOD: {
                if (bi == 0) return hx_jfail(r, "integer division or modulo by zero");
                if (ai == INT64_MIN && bi == -1) goto overflow;
                int64_t q = ai / bi, m = ai % bi;
                if (m != 0 && ((m < 0) != (bi < 0))) {
                    q -= 1;
                    m += bi;
                }
                res = op == HX_JO_MOD ? m : q;
                break;
            }
            case HX_JO_POW: {
                res = 1;
                int64_t base = ai, e = bi;
                while (e > 0) {
                    if ((e & 1) && __builtin_mul_overflow(res, base, &res)) goto overflow;
                    e >>= 1;
                    if (e && __builtin_mul_overflow(base, base, &base)) goto overflow;
                }
                break;
            }
            default:
                return type_error(r, op, a, b);
            }
            *out = hx_jv_int(res);
            return 0;
        }
        double res;
        switch (op) {
        case HX_JO_ADD: res = ad + bd; break;
        case HX_JO_SUB: res = ad - bd; break;
        case HX_JO_MUL: res = ad * bd; break;
        case HX_JO_DIV:
            if (bd == 0) return hx_jfail(r, "division by zero");
            res = ad / bd;
            break;
        case HX_JO_FLOORDIV:
        case HX_JO_MOD: {
            if (bd == 0) return hx_jfail(r, "float modulo or division by zero");
            double d, m = py_fmod(ad, bd, &d);
            res = op == HX_JO_MOD ? m : d;
            break;
        }
        case HX_JO_POW:
            if (ad == 0 && bd < 0) return hx_jfail(r, "0.0 cannot be raised to a negative power");
            if (ad < 0 && bd != floor(bd))
                return hx_jfail(r, "negative number cannot be raised to a fractional power");
            res = pow(ad, bd);
            if (isinf(res) && isfinite(ad) && isfinite(bd))
                return hx_jfail(r, "numerical result out of range");
            break;
        default:
            return type_error(r, op, a, b);
        }
        *out = hx_jv_float(res);
        return 0;
    }
    switch (op) {
    case HX_JO_ADD:
        if (a.type == HX_JV_STR && b.type == HX_JV_STR) {
            /* markupsafe: mixing a Markup with a plain str escapes the plain one. */
            hx_jbuf buf;
            hx_jbuf_init(&buf, &r->arena, 0);
            bool markup = a.flag || b.flag;
            if (markup && !a.flag) hx_jhtml_escape(&buf, a.u.s->s, a.u.s->len);
            else hx_jbuf_add(&buf, a.u.s->s, a.u.s->len);
            if (markup && !b.flag) hx_jhtml_escape(&buf, b.u.s->s, b.u.s->len);
            else hx_jbuf_add(&buf, b.u.s->s, b.u.s->len);
            if (hx_jbuf_check(r, &buf) < 0) return -1;
            if (buf.len > r->lim.max_output_bytes)
                return hx_jfail(r, "string longer than the output limit");
            if (hx_jv_make_str(r, buf.p ? buf.p : "", buf.len, out) < 0) return -1;
            out->flag = markup;
            return 0;
        }
        if (hx_jv_is_list(a) && a.type == b.type) {
            hx_jlist *l = hx_jlist_new(r, a.u.l->n + b.u.l->n);
            if (!l) return -1;
            if (hx_jstep(r, (int64_t)(a.u.l->n + b.u.l->n) / 8) < 0) return -1;
            if (a.u.l->n) memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(hx_jv));
            if (b.u.l->n) memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(hx_jv));
            l->n = a.u.l->n + b.u.l->n;
            *out = hx_jv_of_list(l, (hx_jtype)a.type);
            return 0;
        }
        break;
    case HX_JO_MUL:
        if ((a.type == HX_JV_STR || hx_jv_is_list(a)) && bn && !bf) return repeat(r, a, bi, out);
        if ((b.type == HX_JV_STR || hx_jv_is_list(b)) && an && !af) return repeat(r, b, ai, out);
        break;
    case HX_JO_MOD:
        if (a.type == HX_JV_STR) {
            if (hx_jpercent_format(r, a.u.s, b, out) < 0) return -1;
            return a.flag ? hx_jmarkup_of(r, *out, out) : 0;
        }
        break;
    default:
        break;
    }
    return type_error(r, op, a, b);
overflow:
    return hx_jfail(r, "integer overflow in '%s'", op_text(op));
}

/* `item in container`. */
static int contains(hx_jrender *r, hx_jv container, hx_jv item, bool *out)
{
    switch (container.type) {
    case HX_JV_UNDEF:
        *out = false;
        return 0;
    case HX_JV_STR:
        if (item.type != HX_JV_STR)
            return hx_jfail(r, "'in <string>' requires string as left operand, not %s",
                            hx_jv_type_name(item));
        if (item.u.s->len == 0) {
            *out = true;
            return 0;
        }
        if (hx_jstep_search(r, container.u.s->len, item.u.s->len) < 0) return -1;
        *out = hx_jfind(container.u.s->s, container.u.s->len, item.u.s->s, item.u.s->len) != NULL;
        return 0;
    case HX_JV_LIST:
    case HX_JV_TUPLE:
        if (hx_jstep(r, (int64_t)container.u.l->n / 8) < 0) return -1;
        *out = false;
        for (size_t i = 0; i < container.u.l->n; i++) {
            if (hx_jv_eq(container.u.l->v[i], item, &r->steps)) {
                *out = true;
                break;
            }
            if (hx_jstep(r, 0) < 0) return -1;
        }
        return 0;
    case HX_JV_DICT:
        if (!hx_jv_hashable(item, 0))
            return hx_jfail(r, "unhashable type: '%s'", hx_jv_type_name(item));
        if (hx_jstep(r, (int64_t)container.u.d->n / 8) < 0) return -1;
        *out = hx_jdict_get(container.u.d, item) != NULL;
        return 0;
    default:
        return hx_jfail(r, "argument of type '%s' is not iterable", hx_jv_type_name(container));
    }
}

static int compare(hx_jrender *r, int op, hx_jv a, hx_jv b, bool *out)
{
    int c;
    switch (op) {
    case HX_JO_EQ: *out = hx_jv_eq(a, b, &r->steps); return hx_jstep(r, 0);
    case HX_JO_NE: *out = !hx_jv_eq(a, b, &r->steps); return hx_jstep(r, 0);
    case HX_JO_IN: return contains(r, b, a, out);
    case HX_JO_NOTIN:
        if (contains(r, b, a, out) < 0) return -1;
        *out = !*out;
        return 0;
    default:
        if (hx_jv_cmp(r, a, b, &c) < 0) return -1;
        *out = op == HX_JO_LT ? c < 0 : op == HX_JO_LE ? c <= 0 : op == HX_JO_GT ? c > 0 : c >= 0;
        return 0;
    }
}

/* ---- calls ---- */

int hx_jargs_bind(hx_jrender *r, const char *what, const hx_jargs *a, const char *const *params,
                  int n_params, int n_required, hx_jv *out)
{
    for (int i = 0; i < n_params; i++) out[i] = hx_jv_undef_named(HX_JU_MISSING, NULL, 0);
    if (a->n_pos > n_params)
        return hx_jfail(r, "%s() takes at most %d argument(s) (%d given)", what, n_params,
                        (int)a->n_pos);
    for (int32_t i = 0; i < a->n_pos; i++) out[i] = a->pos[i];
    for (int32_t k = 0; k < a->n_kw; k++) {
        int i;
        for (i = 0; i < n_params; i++)
            if (!strcmp(params[i], a->kw_names[k]->s)) break;
        if (i == n_params)
            return hx_jfail(r, "%s() got an unexpected keyword argument '%s'", what,
                            a->kw_names[k]->s);
        if (!hx_jv_is_missing(out[i]))
            return hx_jfail(r, "%s() got multiple values for argument '%s'", what, params[i]);
        out[i] = a->kw[k];
    }
    for (int i = 0; i < n_required; i++)
        if (hx_jv_is_missing(out[i]))
            return hx_jfail(r, "%s() missing required argument '%s'", what, params[i]);
    return 0;
}

/* Runs a macro or a call block's caller: binds arguments as jinja2's Macro.__call__ does and
 * renders the body in a fresh scope whose parent is the defining scope. */
static int call_macro(hx_jrender *r, const hx_jfunc *fn, const hx_jargs *a, hx_jv *out)
{
    const hx_jnode *def = fn->def;
    const char *mname = fn->kind == HX_JF_CALLER ? "caller" : def->name->s;
    int32_t np = def->n_names;
    if (r->depth >= r->lim.max_depth)
        return hx_jfail(r, "macro calls nested deeper than %d", (int)r->lim.max_depth);
    hx_jscope *sc = scope_new(r, fn->closure);
    if (!sc) return -1;
    bool *used = NULL;
    if (a->n_kw && !(used = hx_jalloc(r, (size_t)a->n_kw * sizeof *used))) return -1;
    if (used) memset(used, 0, (size_t)a->n_kw * sizeof *used);
    int32_t n_pos = a->n_pos < np ? a->n_pos : np;
    for (int32_t i = 0; i < n_pos; i++)
        if (scope_set(r, sc, def->names[i], a->pos[i]) < 0) return -1;
    bool found_caller = false;
    for (int32_t i = n_pos; i < np; i++) {
        hx_jv v = hx_jv_undef_named(HX_JU_MISSING, NULL, 0);
        for (int32_t k = 0; k < a->n_kw; k++)
            if (!used[k] && hx_jstr_eq(a->kw_names[k], def->names[i]->s, def->names[i]->len)) {
                v = a->kw[k];
                used[k] = true;
                break;
            }
        if (hx_jstr_eq(def->names[i], "caller", 6)) found_caller = true;
        if (hx_jv_is_missing(v)) {
            const hx_jnode *dflt = i < def->list2.n ? def->list2.v[i] : NULL;
            if (dflt) {
                if (eval(r, sc, dflt, &v) < 0) return -1;
            } else {
                v = hx_jv_undef_named(HX_JU_NAME, def->names[i], 0);
            }
        }
        if (scope_set(r, sc, def->names[i], v) < 0) return -1;
    }
    if ((def->op & HX_JM_CALLER) && !found_caller) {
        hx_jv v = hx_jv_undef_named(HX_JU_NAME, NULL, 0);
        for (int32_t k = 0; k < a->n_kw; k++)
            if (!used[k] && hx_jstr_eq(a->kw_names[k], "caller", 6)) {
                v = a->kw[k];
                used[k] = true;
            }
        if (scope_set_c(r, sc, "caller", v) < 0) return -1;
    }
    if (def->op & HX_JM_KWARGS) {
        hx_jdict *d = hx_jdict_new(r, 0);
        if (!d) return -1;
        for (int32_t k = 0; k < a->n_kw; k++)
            if (!used[k] && hx_jdict_set(r, d, hx_jv_of_str(a->kw_names[k]), a->kw[k]) < 0)
                return -1;
        if (scope_set_c(r, sc, "kwargs", hx_jv_of_dict(d, HX_JV_DICT)) < 0) return -1;
    } else {
        for (int32_t k = 0; k < a->n_kw; k++)
            if (!used[k])
                return hx_jfail(r, "macro '%s' takes no keyword argument '%s'", mname,
                                a->kw_names[k]->s);
    }
    if (def->op & HX_JM_VARARGS) {
        hx_jlist *l = hx_jlist_new(r, 0);
        if (!l) return -1;
        for (int32_t i = np; i < a->n_pos; i++)
            if (hx_jlist_push(r, l, a->pos[i]) < 0) return -1;
        if (scope_set_c(r, sc, "varargs", hx_jv_of_list(l, HX_JV_TUPLE)) < 0) return -1;
    } else if (a->n_pos > np) {
        return hx_jfail(r, "macro '%s' takes not more than %d argument(s)", mname, (int)np);
    }
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, r->lim.max_output_bytes);
    r->depth++;
    int rc = exec_body(r, sc, def->list, &b);
    r->depth--;
    if (rc < 0) return -1;
    if (hx_jbuf_check(r, &b) < 0) return -1;
    return hx_jv_make_str(r, b.p ? b.p : "", b.len, out);
}

static int loop_method(hx_jrender *r, const hx_jfunc *fn, const hx_jargs *a, hx_jv *out)
{
    hx_jloop *lp = fn->loop;
    if (a->n_kw) return hx_jfail(r, "loop.%s() takes no keyword arguments",
                                 fn->id ? "changed" : "cycle");
    if (fn->id == 0) {
        if (a->n_pos == 0) return hx_jfail(r, "no items for cycling given");
        *out = a->pos[lp->index0 % a->n_pos];
        return 0;
    }
    /* changed(*values): compares the argument tuple with the previous call's. */
    hx_jlist *l = hx_jlist_new(r, (size_t)a->n_pos);
    if (!l) return -1;
    for (int32_t i = 0; i < a->n_pos; i++) l->v[l->n++] = a->pos[i];
    hx_jv cur = hx_jv_of_list(l, HX_JV_TUPLE);
    bool changed = !lp->changed_any || !hx_jv_eq(lp->changed_last, cur, &r->steps);
    lp->changed_last = cur;
    lp->changed_any = true;
    *out = hx_jv_bool(changed);
    return 0;
}

int hx_jcall_value(hx_jrender *r, hx_jv fn, const hx_jargs *a, hx_jv *out)
{
    if (fn.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, fn);
    if (fn.type != HX_JV_FUNC)
        return hx_jfail(r, "'%s' object is not callable", hx_jv_type_name(fn));
    if (hx_jstep(r, 1) < 0) return -1;
    switch (fn.u.fn->kind) {
    case HX_JF_BUILTIN: return hx_jglobal_call(r, fn.u.fn->id, a, out);
    case HX_JF_METHOD: return hx_jmethod_call(r, fn.u.fn, a, out);
    case HX_JF_LOOP_METHOD: return loop_method(r, fn.u.fn, a, out);
    default: return call_macro(r, fn.u.fn, a, out);
    }
}

/* Evaluates a node's positional (list) and keyword (names/list2) arguments. extra, when not
 * NULL, is appended as the keyword argument `caller`. */
static int eval_args(hx_jrender *r, hx_jscope *sc, const hx_jnode *n, const hx_jv *extra,
                     hx_jargs *out)
{
    int32_t nk = n->n_names + (extra ? 1 : 0);
    hx_jv *pos = n->list.n ? hx_jalloc(r, (size_t)n->list.n * sizeof *pos) : NULL;
    hx_jv *kw = nk ? hx_jalloc(r, (size_t)nk * sizeof *kw) : NULL;
    hx_jstr **names = nk ? hx_jalloc(r, (size_t)nk * sizeof *names) : NULL;
    if ((n->list.n && !pos) || (nk && (!kw || !names))) return -1;
    for (int32_t i = 0; i < n->list.n; i++)
        if (eval(r, sc, n->list.v[i], &pos[i]) < 0) return -1;
    for (int32_t i = 0; i < n->n_names; i++) {
        names[i] = n->names[i];
        if (eval(r, sc, n->list2.v[i], &kw[i]) < 0) return -1;
    }
    if (extra) {
        if (!(names[nk - 1] = hx_jstr_make(r, "caller", 6))) return -1;
        kw[nk - 1] = *extra;
    }
    out->pos = pos;
    out->n_pos = n->list.n;
    out->kw_names = names;
    out->kw = kw;
    out->n_kw = nk;
    return 0;
}

static int eval_call(hx_jrender *r, hx_jscope *sc, const hx_jnode *n, const hx_jv *caller,
                     hx_jv *out)
{
    hx_jv fn;
    hx_jargs args;
    if (eval(r, sc, n->a, &fn) < 0) return -1;
    if (eval_args(r, sc, n, caller, &args) < 0) return -1;
    return hx_jcall_value(r, fn, &args, out);
}

/* Applies a filter node (and the chain under it) to input; a chain bottoms out at a node with
 * no input expression (filter blocks, `{% set x | f %}`). */
static int apply_filter_chain(hx_jrender *r, hx_jscope *sc, const hx_jnode *f, hx_jv input,
                              hx_jv *out)
{
    hx_jv in = input;
    if (f->a && apply_filter_chain(r, sc, f->a, input, &in) < 0) return -1;
    if (f->id < 0) return hx_jfail(r, "no filter named '%s'", f->name->s);
    hx_jargs args;
    if (eval_args(r, sc, f, NULL, &args) < 0) return -1;
    return hx_jfilter_call(r, f->id, in, &args, out);
}

/* ---- expressions ---- */

static int eval_inner(hx_jrender *r, hx_jscope *sc, const hx_jnode *n, hx_jv *out)
{
    hx_jv a, b;
    switch (n->kind) {
    case HX_JN_CONST:
        *out = n->value;
        return 0;
    case HX_JN_NAME:
        if (!lookup(r, sc, n->name, out)) {
            if (r->failed) return -1;
            *out = hx_jv_undef_named(HX_JU_NAME, n->name, 0);
        }
        return 0;
    case HX_JN_LIST:
    case HX_JN_TUPLE: {
        hx_jlist *l = hx_jlist_new(r, (size_t)n->list.n);
        if (!l) return -1;
        for (int32_t i = 0; i < n->list.n; i++)
            if (eval(r, sc, n->list.v[i], &l->v[l->n++]) < 0) return -1;
        *out = hx_jv_of_list(l, n->kind == HX_JN_LIST ? HX_JV_LIST : HX_JV_TUPLE);
        return 0;
    }
    case HX_JN_DICT: {
        hx_jdict *d = hx_jdict_new(r, (size_t)n->list.n);
        if (!d) return -1;
        for (int32_t i = 0; i < n->list.n; i++) {
            if (eval(r, sc, n->list.v[i], &a) < 0 || eval(r, sc, n->list2.v[i], &b) < 0)
                return -1;
            if (!hx_jv_hashable(a, 0))
                return hx_jfail(r, "unhashable type: '%s'", hx_jv_type_name(a));
            if (hx_jdict_set(r, d, a, b) < 0) return -1;
        }
        *out = hx_jv_of_dict(d, HX_JV_DICT);
        return 0;
    }
    case HX_JN_GETATTR:
        if (eval(r, sc, n->a, &a) < 0) return -1;
        return hx_jgetattr(r, a, n->name, out);
    case HX_JN_GETITEM:
        if (eval(r, sc, n->a, &a) < 0) return -1;
        if (n->b->kind == HX_JN_SLICE) {
            const hx_jnode *s = n->b;
            hx_jv v[3] = {hx_jv_none(), hx_jv_none(), hx_jv_none()};
            const hx_jnode *parts[3] = {s->a, s->b, s->c};
            for (int k = 0; k < 3; k++)
                if (parts[k] && eval(r, sc, parts[k], &v[k]) < 0) return -1;
            return do_slice(r, a, v[0], v[1], v[2], out);
        }
        if (eval(r, sc, n->b, &b) < 0) return -1;
        return hx_jgetitem(r, a, b, out);
    case HX_JN_SLICE:
        return hx_jfail(r, "a slice is only valid inside []");
    case HX_JN_CALL:
        return eval_call(r, sc, n, NULL, out);
    case HX_JN_FILTER: {
        hx_jargs args;
        if (eval(r, sc, n->a, &a) < 0 || eval_args(r, sc, n, NULL, &args) < 0) return -1;
        if (n->id < 0) return hx_jfail(r, "no filter named '%s'", n->name->s);
        return hx_jfilter_call(r, n->id, a, &args, out);
    }
    case HX_JN_TEST: {
        hx_jargs args;
        bool res;
        if (eval(r, sc, n->a, &a) < 0 || eval_args(r, sc, n, NULL, &args) < 0) return -1;
        if (n->id < 0) return hx_jfail(r, "no test named '%s'", n->name->s);
        if (hx_jtest_call(r, n->id, a, &args, &res) < 0) return -1;
        *out = hx_jv_bool(res);
        return 0;
    }
    case HX_JN_NOT:
        if (eval(r, sc, n->a, &a) < 0) return -1;
        *out = hx_jv_bool(!hx_jv_truthy(a));
        return 0;
    case HX_JN_NEG:
    case HX_JN_POS:
        if (eval(r, sc, n->a, &a) < 0) return -1;
        if (a.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, a);
        if (a.type == HX_JV_FLOAT) *out = hx_jv_float(n->kind == HX_JN_NEG ? -a.u.f : a.u.f);
        else if (a.type == HX_JV_INT || a.type == HX_JV_BOOL) {
            int64_t i = a.type == HX_JV_BOOL ? a.u.b : a.u.i;
            if (n->kind == HX_JN_NEG && i == INT64_MIN) return hx_jfail(r, "integer overflow");
            *out = hx_jv_int(n->kind == HX_JN_NEG ? -i : i);
        } else {
            return hx_jfail(r, "bad operand type for unary %c: '%s'",
                            n->kind == HX_JN_NEG ? '-' : '+', hx_jv_type_name(a));
        }
        return 0;
    case HX_JN_BINOP:
        if (eval(r, sc, n->a, &a) < 0 || eval(r, sc, n->b, &b) < 0) return -1;
        return binop(r, n->op, a, b, out);
    case HX_JN_AND:
    case HX_JN_OR:
        if (eval(r, sc, n->a, &a) < 0) return -1;
        if (hx_jv_truthy(a) == (n->kind == HX_JN_OR)) {
            *out = a;
            return 0;
        }
        return eval(r, sc, n->b, out);
    case HX_JN_CONCAT: {
        hx_jbuf buf;
        hx_jbuf_init(&buf, &r->arena, r->lim.max_output_bytes);
        for (int32_t i = 0; i < n->list.n; i++) {
            if (eval(r, sc, n->list.v[i], &a) < 0) return -1;
            if (hx_jv_str_append(r, &buf, a) < 0) return -1;
        }
        if (hx_jbuf_check(r, &buf) < 0) return -1;
        return hx_jv_make_str(r, buf.p ? buf.p : "", buf.len, out);
    }
    case HX_JN_COMPARE: {
        if (eval(r, sc, n->a, &a) < 0) return -1;
        bool res = true;
        for (int32_t i = 0; i < n->list.n && res; i++) {
            if (eval(r, sc, n->list.v[i], &b) < 0) return -1;
            if (compare(r, n->ops[i], a, b, &res) < 0) return -1;
            a = b;
        }
        *out = hx_jv_bool(res);
        return 0;
    }
    case HX_JN_COND:
        if (eval(r, sc, n->a, &a) < 0) return -1;
        if (hx_jv_truthy(a)) return eval(r, sc, n->b, out);
        if (n->c) return eval(r, sc, n->c, out);
        *out = hx_jv_undef_named(HX_JU_HINT, NULL, 0);
        return 0;
    default:
        return hx_jfail(r, "statement used as an expression");
    }
}

static int eval(hx_jrender *r, hx_jscope *sc, const hx_jnode *n, hx_jv *out)
{
    if (hx_jstep(r, 1) < 0) goto locate;
    if (++r->stack > MAX_STACK) {
        r->stack--;
        hx_jfail(r, "expression nested too deeply");
        goto locate;
    }
    int rc = eval_inner(r, sc, n, out);
    r->stack--;
    if (rc == 0) return 0;
locate:
    if (!r->located) {
        r->located = true;
        r->line = n->line;
        r->col = n->col;
    }
    return -1;
}

/* ---- statements ---- */

static int assign(hx_jrender *r, hx_jscope *sc, const hx_jnode *target, hx_jv v)
{
    if (target->kind == HX_JN_NAME) return scope_set(r, sc, target->name, v);
    if (target->kind == HX_JN_NSREF) {
        hx_jv ns;
        if (!lookup(r, sc, target->name2, &ns)) {
            if (r->failed) return -1;
            ns = hx_jv_undef_named(HX_JU_NAME, target->name2, 0);
        }
        if (ns.type != HX_JV_NS)
            return hx_jfail(r, "cannot assign attribute on non-namespace object");
        if (target->name->len && target->name->s[0] == '_')
            return hx_jfail(r, "chat templates cannot store underscore-prefixed attributes "
                               "on a namespace, but got '%s'", target->name->s);
        return hx_jdict_set(r, ns.u.d, hx_jv_of_str(target->name), v);
    }
    /* tuple unpacking */
    const hx_jlist *items;
    if (v.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, v);
    if (hx_jv_iter(r, v, &items) < 0) return -1;
    if ((int64_t)items->n != target->list.n)
        return hx_jfail(r, (int64_t)items->n > target->list.n
                               ? "too many values to unpack (expected %d)"
                               : "not enough values to unpack (expected %d)",
                        (int)target->list.n);
    for (int32_t i = 0; i < target->list.n; i++)
        if (assign(r, sc, target->list.v[i], items->v[i]) < 0) return -1;
    return 0;
}

static int exec_for(hx_jrender *r, hx_jscope *sc, const hx_jnode *n, hx_jbuf *out)
{
    hx_jv seq;
    const hx_jlist *all;
    if (eval(r, sc, n->b, &seq) < 0) return -1;
    if (seq.type == HX_JV_NONE || seq.type == HX_JV_INT || seq.type == HX_JV_FLOAT ||
        seq.type == HX_JV_BOOL)
        return hx_jfail(r, "'%s' object is not iterable", hx_jv_type_name(seq));
    if (hx_jv_iter(r, seq, &all) < 0) return -1;
    const hx_jlist *items = all;
    if (n->c) { /* `for x in xs if cond`: filter first, so loop.length counts what runs */
        hx_jlist *kept = hx_jlist_new(r, 0);
        if (!kept) return -1;
        for (size_t i = 0; i < all->n; i++) {
            hx_jscope *fs = scope_new(r, sc);
            hx_jv keep;
            if (!fs || assign(r, fs, n->a, all->v[i]) < 0 || eval(r, fs, n->c, &keep) < 0)
                return -1;
            if (hx_jv_truthy(keep) && hx_jlist_push(r, kept, all->v[i]) < 0) return -1;
        }
        items = kept;
    }
    hx_jloop *lp = hx_jalloc(r, sizeof *lp);
    if (!lp) return -1;
    memset(lp, 0, sizeof *lp);
    lp->items = items;
    hx_jv loopv = {0};
    loopv.type = HX_JV_LOOP;
    loopv.u.loop = lp;
    hx_jstr *loop_name = hx_jstr_make(r, "loop", 4);
    hx_jscope *it = scope_new(r, sc);
    if (!loop_name || !it) return -1;
    for (size_t i = 0; i < items->n; i++) {
        if (hx_jstep(r, 1) < 0) return -1;
        lp->index0 = (int64_t)i;
        /* Each iteration starts from an empty scope. Reusing its storage keeps long loops from
         * growing the arena; a macro defined in the body and kept past its iteration sees the
         * latest iteration's variables, which is also what jinja2's Python closures see. */
        it->n = 0;
        if (assign(r, it, n->a, items->v[i]) < 0 || scope_set(r, it, loop_name, loopv) < 0)
            return -1;
        int rc = exec_body(r, it, n->list, out);
        if (rc < 0) return -1;
        if (rc == EXEC_BREAK) break;
    }
    if (items->n == 0 && n->list2.n) {
        hx_jscope *es = scope_new(r, sc);
        if (!es) return -1;
        int rc = exec_body(r, es, n->list2, out);
        if (rc < 0) return -1;
    }
    return 0;
}

/* Renders body into a new string in a child scope (set blocks, filter blocks). */
static int capture(hx_jrender *r, hx_jscope *sc, hx_jnodes body, hx_jv *out)
{
    hx_jscope *cs = scope_new(r, sc);
    if (!cs) return -1;
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, r->lim.max_output_bytes);
    if (r->depth >= r->lim.max_depth)
        return hx_jfail(r, "blocks nested deeper than %d", (int)r->lim.max_depth);
    r->depth++;
    int rc = exec_body(r, cs, body, &b);
    r->depth--;
    if (rc < 0 || hx_jbuf_check(r, &b) < 0) return -1;
    return hx_jv_make_str(r, b.p ? b.p : "", b.len, out);
}

static int exec_stmt(hx_jrender *r, hx_jscope *sc, const hx_jnode *n, hx_jbuf *out)
{
    hx_jv v;
    switch (n->kind) {
    case HX_JN_TEXT:
        hx_jbuf_add(out, n->value.u.s->s, n->value.u.s->len);
        return hx_jbuf_check(r, out);
    case HX_JN_OUTPUT:
        if (eval(r, sc, n->a, &v) < 0) return -1;
        if (hx_jv_str_append(r, out, v) < 0) return -1;
        return hx_jbuf_check(r, out);
    case HX_JN_IF:
        if (eval(r, sc, n->a, &v) < 0) return -1;
        return exec_body(r, sc, hx_jv_truthy(v) ? n->list : n->list2, out);
    case HX_JN_FOR:
        return exec_for(r, sc, n, out);
    case HX_JN_SET:
        if (eval(r, sc, n->b, &v) < 0) return -1;
        return assign(r, sc, n->a, v);
    case HX_JN_SET_BLOCK:
        if (capture(r, sc, n->list, &v) < 0) return -1;
        if (n->b && apply_filter_chain(r, sc, n->b, v, &v) < 0) return -1;
        return assign(r, sc, n->a, v);
    case HX_JN_MACRO: {
        hx_jfunc *fn = hx_jalloc(r, sizeof *fn);
        if (!fn) return -1;
        memset(fn, 0, sizeof *fn);
        fn->kind = HX_JF_MACRO;
        fn->def = n;
        fn->closure = sc;
        memset(&v, 0, sizeof v);
        v.type = HX_JV_FUNC;
        v.u.fn = fn;
        return scope_set(r, sc, n->name, v);
    }
    case HX_JN_CALL_BLOCK: {
        hx_jfunc *fn = hx_jalloc(r, sizeof *fn);
        if (!fn) return -1;
        memset(fn, 0, sizeof *fn);
        fn->kind = HX_JF_CALLER;
        fn->def = n;
        fn->closure = sc;
        hx_jv caller = {0};
        caller.type = HX_JV_FUNC;
        caller.u.fn = fn;
        if (eval_call(r, sc, n->a, &caller, &v) < 0) return -1;
        if (hx_jv_str_append(r, out, v) < 0) return -1;
        return hx_jbuf_check(r, out);
    }
    case HX_JN_FILTER_BLOCK:
        if (capture(r, sc, n->list, &v) < 0) return -1;
        if (apply_filter_chain(r, sc, n->b, v, &v) < 0) return -1;
        if (hx_jv_str_append(r, out, v) < 0) return -1;
        return hx_jbuf_check(r, out);
    case HX_JN_SCOPE: {
        hx_jscope *cs = scope_new(r, sc);
        if (!cs) return -1;
        return exec_body(r, cs, n->list, out);
    }
    case HX_JN_WITH: {
        hx_jscope *cs = scope_new(r, sc);
        if (!cs) return -1;
        for (int32_t i = 0; i < n->list2.n; i++) {
            if (eval(r, sc, n->list2.v[i], &v) < 0) return -1;
            if (assign(r, cs, n->a->list.v[i], v) < 0) return -1;
        }
        return exec_body(r, cs, n->list, out);
    }
    case HX_JN_BREAK:
        return EXEC_BREAK;
    case HX_JN_CONTINUE:
        return EXEC_CONTINUE;
    default:
        return hx_jfail(r, "expression used as a statement");
    }
}

static int exec_body(hx_jrender *r, hx_jscope *sc, hx_jnodes body, hx_jbuf *out)
{
    for (int32_t i = 0; i < body.n; i++) {
        const hx_jnode *n = body.v[i];
        int rc = hx_jstep(r, 1);
        if (rc == 0) {
            if (++r->stack > MAX_STACK) rc = hx_jfail(r, "template nested too deeply");
            else rc = exec_stmt(r, sc, n, out);
            r->stack--;
        }
        if (rc < 0) {
            if (!r->located) {
                r->located = true;
                r->line = n->line;
                r->col = n->col;
            }
            return -1;
        }
        if (rc) return rc; /* break / continue travel up to their loop */
    }
    return 0;
}

/* ---- entry ---- */

hx_template_limits hx_template_limits_default(void)
{
    hx_template_limits l;
    l.max_output_bytes = (size_t)64 << 20;
    l.max_memory_bytes = (size_t)256 << 20;
    l.max_steps = 100000000;
    l.max_depth = 200;
    return l;
}

hx_status hx_template_render(const hx_template *t, json_t *ctx, char **out, size_t *out_len,
                             hx_err *err)
{
    return hx_template_render_ex(t, ctx, NULL, out, out_len, err);
}

hx_status hx_template_render_ex(const hx_template *t, json_t *ctx, const hx_template_limits *lim,
                                char **out, size_t *out_len, hx_err *err)
{
    hx_status st = HX_OK;
    hx_jrender r;
    memset(&r, 0, sizeof r);
    hx_template_limits d = hx_template_limits_default();
    r.lim = lim ? *lim : d;
    if (!r.lim.max_output_bytes) r.lim.max_output_bytes = d.max_output_bytes;
    if (!r.lim.max_memory_bytes) r.lim.max_memory_bytes = d.max_memory_bytes;
    if (!r.lim.max_steps) r.lim.max_steps = d.max_steps;
    if (!r.lim.max_depth) r.lim.max_depth = d.max_depth;
    r.arena.limit_bytes = r.lim.max_memory_bytes;
    if (!t) return hx_err_set(err, HX_E_INVALID, "no template");
    if (ctx && !json_is_object(ctx))
        return hx_err_set(err, HX_E_INVALID, "the template context must be a JSON object");
    hx_jv c;
    hx_jscope *root = NULL;
    hx_jbuf buf;
    hx_jbuf_init(&buf, &r.arena, r.lim.max_output_bytes);
    if (ctx) {
        if (hx_jv_from_json(&r, ctx, &c, 0) < 0) goto fail;
        r.ctx = c.u.d;
    } else if (!(r.ctx = hx_jdict_new(&r, 0))) {
        goto fail;
    }
    if (!(root = scope_new(&r, NULL))) goto fail;
    if (exec_body(&r, root, t->body, &buf) < 0) goto fail;
    if (hx_jbuf_check(&r, &buf) < 0) goto fail;
    char *text = hx_alloc(buf.len + 1);
    if (!text) {
        hx_jnomem(&r);
        goto fail;
    }
    if (buf.len) memcpy(text, buf.p, buf.len);
    text[buf.len] = '\0';
    *out = text;
    if (out_len) *out_len = buf.len;
    hx_jarena_free(&r.arena);
    return HX_OK;
fail:
    st = r.status != HX_OK ? r.status : HX_E_INVALID;
    if (r.located)
        hx_err_set(err, st, "line %d, column %d: %s", (int)r.line, (int)r.col, r.msg);
    else
        hx_err_set(err, st, "%s", r.msg);
    hx_jarena_free(&r.arena);
    return st;
}
