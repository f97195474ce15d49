/* cmd_template.c - `hearth template SOURCE`: renders a chat template for a request on stdin.
 *
 * SOURCE is a .jinja file or a model (path, HF repo id or name; see `hearth ls`), whose default
 * chat template is used. Standard input holds one JSON object: {"messages": [...], "tools":
 * [...], "add_generation_prompt": true, "bos_token": "<s>", ...any other keyword}. The context
 * is built as transformers' apply_chat_template builds it (template/jinja.h,
 * hx_template_chat_context); a model also supplies bos_token and eos_token when the request
 * does not. The rendered text goes to stdout exactly, with nothing added; on failure the error
 * goes to stderr and the exit status is 1. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "format/discover.h"
#include "format/gguf.h"
#include "format/model_files.h"
#include "template/jinja.h"

/* Reads all of f into a new hx_alloc'd buffer. */
static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = hx_alloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *nb = hx_realloc(buf, cap * 2);
            if (!nb) {
                hx_free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        hx_free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The text of GGUF token `key` (tokenizer.ggml.bos_token_id ...) into a new json string. */
static json_t *gguf_token(const hx_gguf *g, const char *key)
{
    uint64_t id;
    const hx_gguf_kv *toks = hx_gguf_find(g, "tokenizer.ggml.tokens");
    if (!toks || !hx_gguf_get_u64(g, key, &id) || toks->type != HX_GGUF_ARRAY ||
        toks->arr_type != HX_GGUF_STRING || id >= toks->arr_n)
        return NULL;
    uint64_t pos = 0;
    const unsigned char *cursor = NULL;
    hx_gguf_str s;
    while (hx_gguf_str_array(toks, &pos, &cursor, &s))
        if (pos - 1 == id) return json_stringn(s.ptr, (size_t)s.len);
    return NULL;
}

/* bos_token/eos_token of a Hugging Face folder: tokenizer_config.json, strings or
 * {"content": ...} objects. */
static json_t *config_token(const char *dir, const char *key)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    if (!cfg) return NULL;
    json_t *v = json_object_get(cfg, key), *out = NULL;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (json_is_string(v)) out = json_stringn(json_string_value(v), json_string_length(v));
    json_decref(cfg);
    return out;
}

int hx_cmd_template(int argc, char **argv)
{
    int rc = 1;
    hx_err err = {0};
    char *src = NULL, *input = NULL, *path = NULL, *text = NULL;
    size_t src_len = 0, in_len = 0, text_len = 0;
    hx_model_files *mf = NULL;
    hx_template *t = NULL;
    json_t *req = NULL, *ctx = NULL, *bos = NULL, *eos = NULL;
    if (argc != 1 || argv[0][0] == '-') {
        fprintf(stderr, "usage: hearth template SOURCE < request.json\n"
                        "  SOURCE: a .jinja file or a model; the request is one JSON object\n");
        return 2;
    }
    const char *source = argv[0];
    if (ends_with(source, ".jinja")) {
        FILE *f = fopen(source, "rb");
        if (!f) {
            fprintf(stderr, "hearth template: cannot open %s\n", source);
            goto done;
        }
        src = read_all(f, &src_len);
        fclose(f);
        if (!src) {
            fprintf(stderr, "hearth template: cannot read %s\n", source);
            goto done;
        }
    } else {
        if (hx_discover_resolve(source, &path, &err) != HX_OK ||
            hx_model_files_open(path, &mf, &err) != HX_OK) {
            fprintf(stderr, "hearth template: %s\n", err.msg);
            goto done;
        }
        if (!mf->chat_template) {
            fprintf(stderr, "hearth template: %s has no chat template\n", path);
            goto done;
        }
        src_len = strlen(mf->chat_template);
        if (!(src = hx_alloc(src_len + 1))) goto nomem;
        memcpy(src, mf->chat_template, src_len + 1);
        if (mf->gguf) {
            bos = gguf_token(mf->gguf, "tokenizer.ggml.bos_token_id");
            eos = gguf_token(mf->gguf, "tokenizer.ggml.eos_token_id");
        } else {
            bos = config_token(mf->path, "bos_token");
            eos = config_token(mf->path, "eos_token");
        }
    }
    if (!(input = read_all(stdin, &in_len))) goto nomem;
    json_error_t jerr;
    req = json_loadb(input, in_len, JSON_ALLOW_NUL, &jerr);
    if (!req) {
        fprintf(stderr, "hearth template: request: line %d, column %d: %s\n", jerr.line,
                jerr.column, jerr.text);
        goto done;
    }
    if (hx_template_chat_context(req, &ctx, &err) != HX_OK) {
        fprintf(stderr, "hearth template: %s\n", err.msg);
        goto done;
    }
    if (bos && !json_object_get(ctx, "bos_token")) json_object_set(ctx, "bos_token", bos);
    if (eos && !json_object_get(ctx, "eos_token")) json_object_set(ctx, "eos_token", eos);
    if (hx_template_compile(src, src_len, &t, &err) != HX_OK) {
        fprintf(stderr, "hearth template: %s: %s\n", source, err.msg);
        goto done;
    }
    if (hx_template_render(t, ctx, &text, &text_len, &err) != HX_OK) {
        fprintf(stderr, "hearth template: %s: %s\n", source, err.msg);
        goto done;
    }
    if (fwrite(text, 1, text_len, stdout) != text_len || fflush(stdout) != 0) {
        fprintf(stderr, "hearth template: cannot write the output\n");
        goto done;
    }
    rc = 0;
    goto done;
nomem:
    fprintf(stderr, "hearth template: out of memory\n");
done:
    hx_free(text);
    hx_template_free(t);
    json_decref(ctx);
    json_decref(req);
    json_decref(bos);
    json_decref(eos);
    hx_free(input);
    hx_free(src);
    hx_model_files_close(mf);
    hx_free(path);
    return rc;
}
