/* fuzz_hub.c - libFuzzer target for the Hugging Face hub's file listing and safetensors index
 * (src/format/hub.h), the JSON `hearth get` reads from the network.
 *
 * Each input is parsed as a listing by hx_hub_repo_parse, the production entry point; a listing
 * that parses is planned with several selectors (none, quants, its own first and last file names)
 * and the same bytes are applied to each safetensors plan as its index. Then the bytes, as one
 * string, go through the name checks. __builtin_trap marks a broken invariant: a listed path
 * that could leave the cache, a plan index out of range, or a leak (hx_alloc's live bytes).
 * Build: clang -fsanitize=fuzzer,address,undefined. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "format/hub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_plan(const hx_hub_repo *r, const hx_hub_plan *p)
{
    if (p->n_files < 1) __builtin_trap();
    for (int i = 0; i < p->n_files; i++)
        if (p->files[i] < 0 || p->files[i] >= r->n_files) __builtin_trap();
    if (p->index >= r->n_files) __builtin_trap();
}

static void plan_with(const hx_hub_repo *r, const char *sel, const uint8_t *data, size_t size)
{
    hx_hub_plan p;
    hx_err err = { 0 };
    if (hx_hub_plan_make(r, sel, &p, &err) != HX_OK) {
        if (err.msg[0] == '\0' || p.files) __builtin_trap();
        return;
    }
    check_plan(r, &p);
    if (p.kind == HX_HUB_SAFETENSORS) {
        hx_err e = { 0 };
        if (hx_hub_plan_apply_index(&p, r, (const char *)data, size, &e) == HX_OK) check_plan(r, &p);
        else if (e.msg[0] == '\0') __builtin_trap();
    }
    hx_hub_plan_free(&p);
}

static void names(const uint8_t *data, size_t size)
{
    char s[2048], out[4096], repo[256], sel[256];
    size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
    memcpy(s, data, n);
    s[n] = '\0';
    hx_err err = { 0 };
    int part, n_parts;
    size_t stem;
    if (hx_hub_gguf_split(s, &part, &n_parts, &stem) && (part < 1 || part > n_parts || stem >= n))
        __builtin_trap();
    if (hx_hub_quant_match(s, "Q4_K_M") > 2) __builtin_trap();
    hx_hub_etag_clean(s, out, sizeof out);
    if (out[0] && !hx_hub_etag_valid(out)) __builtin_trap();
    if (hx_hub_spec_parse(s, repo, sizeof repo, sel, sizeof sel, &err) == HX_OK && !hx_hub_repo_id_valid(repo))
        __builtin_trap();
    if (hx_hub_path_valid(s)) {
        /* no component may climb out: "..", "../x", "x/../y", "x/.." */
        const size_t len = strlen(s);
        if (s[0] == '/' || strcmp(s, "..") == 0 || strncmp(s, "../", 3) == 0 || strstr(s, "/../") ||
            (len >= 3 && strcmp(s + len - 3, "/..") == 0))
            __builtin_trap();
        hx_hub_blob_link(s, "e", out, sizeof out);
        hx_hub_url_path(s, out, sizeof out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t live = hx_alloc_live_bytes();
    hx_hub_repo r;
    hx_err err = { 0 };
    if (hx_hub_repo_parse((const char *)data, size, &r, &err) != HX_OK) {
        if (err.status == HX_OK || err.msg[0] == '\0' || r.files) __builtin_trap();
    } else {
        if (r.commit[0] && !hx_hub_commit_valid(r.commit)) __builtin_trap();
        for (int i = 0; i < r.n_files; i++) {
            if (!hx_hub_path_valid(r.files[i].path)) __builtin_trap();
            if (r.files[i].sha256[0] && !hx_hub_is_sha256(r.files[i].sha256)) __builtin_trap();
        }
        char choices[300];
        hx_hub_gguf_choices(&r, choices, sizeof choices);
        if (strlen(choices) >= sizeof choices) __builtin_trap();
        plan_with(&r, "", data, size);
        plan_with(&r, "Q4_K_M", data, size);
        plan_with(&r, "q8", data, size);
        if (r.n_files) {
            plan_with(&r, r.files[0].path, data, size);
            plan_with(&r, r.files[r.n_files - 1].path, data, size);
        }
        hx_hub_repo_free(&r);
    }
    names(data, size);
    if (hx_alloc_live_bytes() != live) __builtin_trap();
    return 0;
}
