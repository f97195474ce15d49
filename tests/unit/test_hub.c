/* test_hub.c - the hub's file listing, file choice and cache names (src/format/hub.h), without
 * the network: listings are written here as the hub's JSON. */
#include "base/alloc.h"
#include "check.h"
#include "format/hub.h"

#define SHA_A "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

static int test_repo_ids(void)
{
    static const char *good[] = { "Qwen/Qwen3-0.6B", "gpt2", "a_b/c.d", "bartowski/Llama-3.2-1B-Instruct-GGUF" };
    static const char *bad[] = { "", "a--b/c", "a/b/c", "/x", "x/", "a..b/c", "-x/y", "org/name-",
                                 "org/na me", "org/x:y" };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (!hx_hub_repo_id_valid(good[i])) CHECK_FAIL("'%s' should be valid", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (hx_hub_repo_id_valid(bad[i])) CHECK_FAIL("'%s' should be refused", bad[i]);
    return 0;
}

static int test_spec_parse(void)
{
    char repo[128], sel[128];
    hx_err err = {0};
    CHECK_EQ(hx_hub_spec_parse("TheOrg/M-GGUF:Q4_K_M", repo, sizeof repo, sel, sizeof sel, &err), HX_OK);
    CHECK_STR(repo, "TheOrg/M-GGUF");
    CHECK_STR(sel, "Q4_K_M");
    CHECK_EQ(hx_hub_spec_parse("TheOrg/M", repo, sizeof repo, sel, sizeof sel, &err), HX_OK);
    CHECK_STR(sel, "");
    CHECK_EQ(hx_hub_spec_parse("TheOrg/M:", repo, sizeof repo, sel, sizeof sel, &err), HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "nothing after ':'");
    err = (hx_err){0};
    CHECK_EQ(hx_hub_spec_parse("no good/id", repo, sizeof repo, sel, sizeof sel, &err), HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "not a Hugging Face repo id");
    return 0;
}

static int test_paths_that_could_leave_the_cache_are_refused(void)
{
    static const char *good[] = { "a.json", "sub/dir/x.gguf", ".gitattributes", "a b.txt", "x..y" };
    static const char *bad[] = { "", "/abs", "../x", "a/../b", "a//b", "a/./b", "a\\b", "x\n", "a/",
                                 "..", "." };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (!hx_hub_path_valid(good[i])) CHECK_FAIL("'%s' should be valid", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (hx_hub_path_valid(bad[i])) CHECK_FAIL("'%s' should be refused", bad[i]);
    return 0;
}

static int test_etags_and_commits(void)
{
    char e[130];
    hx_hub_etag_clean("\"abc123\"", e, sizeof e);
    CHECK_STR(e, "abc123");
    hx_hub_etag_clean("W/\"abc-1\"", e, sizeof e);
    CHECK_STR(e, "abc-1");
    hx_hub_etag_clean(" \"" SHA_A "\" ", e, sizeof e);
    CHECK_STR(e, SHA_A);
    hx_hub_etag_clean("\"../../x\"", e, sizeof e);
    CHECK_STR(e, "");
    hx_hub_etag_clean("\".hidden\"", e, sizeof e);
    CHECK_STR(e, "");
    hx_hub_etag_clean("\"\"", e, sizeof e);
    CHECK_STR(e, "");
    CHECK(hx_hub_is_sha256(SHA_A));
    CHECK(!hx_hub_is_sha256("abc"));
    CHECK(hx_hub_commit_valid("0123456789abcdef0123456789abcdef01234567"));
    CHECK(!hx_hub_commit_valid("../x"));
    CHECK(!hx_hub_commit_valid(""));
    return 0;
}

static int test_cache_names_as_huggingface_hub_writes_them(void)
{
    char b[256];
    CHECK(hx_hub_repo_folder("Org/Name-1.5B", b, sizeof b));
    CHECK_STR(b, "models--Org--Name-1.5B");
    CHECK(hx_hub_repo_folder("gpt2", b, sizeof b));
    CHECK_STR(b, "models--gpt2");
    CHECK(hx_hub_blob_link("config.json", "e1", b, sizeof b));
    CHECK_STR(b, "../../blobs/e1");
    CHECK(hx_hub_blob_link("F16/a/x.gguf", "e2", b, sizeof b));
    CHECK_STR(b, "../../../../blobs/e2");
    CHECK(!hx_hub_blob_link("x", "e", b, 8));
    CHECK(hx_hub_url_path("a b/c+d~_.gguf", b, sizeof b));
    CHECK_STR(b, "a%20b/c%2Bd~_.gguf");
    return 0;
}

static int test_quant_matching(void)
{
    static const struct { const char *file, *quant; int want; } t[] = {
        { "M-Q4_K_M.gguf", "q4_k_m", 2 },
        { "M-Q4_K_M.gguf", "Q4_K", 1 },
        { "M-IQ4_XS.gguf", "Q4_XS", 0 },
        { "M-IQ4_XS.gguf", "IQ4_XS", 2 },
        { "M.Q4_0.gguf", "Q4", 1 },
        { "M.Q4_0.gguf", "Q4_0", 2 },
        { "m-q8_0-00001-of-00002.gguf", "Q8_0", 2 },
        { "Q4_K_M/m-Q4_K_M-00001-of-00003.gguf", "Q4_K_M", 2 },
        { "Q5_K_M/m-Q4_K_M.gguf", "Q5_K_M", 0 },   /* the file's name decides, not its folder */
        { "model-f16.gguf", "F16", 2 },
        { "model-bf16.gguf", "F16", 0 },
        { "qwen2.5-0.5b-instruct-q4_k_m.gguf", "Q4_K_M", 2 },
        { "M-Q4_K_M.gguf", "", 0 },
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        const int got = hx_hub_quant_match(t[i].file, t[i].quant);
        if (got != t[i].want) CHECK_FAIL("quant_match(%s, %s) = %d, want %d", t[i].file, t[i].quant, got, t[i].want);
    }
    int part, n;
    size_t stem;
    CHECK(hx_hub_gguf_split("F16/m-00002-of-00005.gguf", &part, &n, &stem));
    CHECK_EQ(part, 2);
    CHECK_EQ(n, 5);
    CHECK_EQ(stem, 5);
    CHECK(!hx_hub_gguf_split("m.gguf", &part, &n, &stem));
    CHECK(!hx_hub_gguf_split("m-00006-of-00005.gguf", &part, &n, &stem));
    CHECK(!hx_hub_gguf_split("m-00000-of-00005.gguf", &part, &n, &stem));
    CHECK(!hx_hub_gguf_split("m-0001-of-00005.gguf", &part, &n, &stem));
    return 0;
}

/* A listing in the hub's shape: {"sha": ..., "siblings": [{"rfilename", "size", "lfs"}]}. */
static hx_status parse(const char *json, hx_hub_repo *r, hx_err *err)
{
    return hx_hub_repo_parse(json, strlen(json), r, err);
}

static const char *safetensors_listing =
    "{\"id\":\"o/m\",\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":["
    "{\"rfilename\":\".gitattributes\",\"size\":10},"
    "{\"rfilename\":\"README.md\",\"size\":10},"
    "{\"rfilename\":\"config.json\",\"size\":700},"
    "{\"rfilename\":\"consolidated.safetensors\",\"size\":9,\"lfs\":{\"sha256\":\"" SHA_A "\",\"size\":9}},"
    "{\"rfilename\":\"model-00002-of-00002.safetensors\",\"lfs\":{\"sha256\":\"" SHA_A "\",\"size\":5}},"
    "{\"rfilename\":\"model-00001-of-00002.safetensors\",\"size\":6},"
    "{\"rfilename\":\"model.safetensors.index.json\",\"size\":100},"
    "{\"rfilename\":\"original/consolidated.safetensors\",\"size\":3},"
    "{\"rfilename\":\"tokenizer.json\"},"
    "{\"rfilename\":\"tokenizer_config.json\"},"
    "{\"rfilename\":\"chat_template.jinja\"},"
    "{\"rfilename\":\"generation_config.json\"},"
    "{\"rfilename\":\"../escape\"},{\"rfilename\":\"/etc/passwd\"},{\"rfilename\":7},"
    "{\"rfilename\":\"config.json\"}"
    "]}";

static int test_listing_is_parsed_and_unsafe_names_skipped(void)
{
    hx_hub_repo r;
    hx_err err = {0};
    size_t live = hx_alloc_live_bytes();
    CHECK_EQ(parse(safetensors_listing, &r, &err), HX_OK);
    CHECK_STR(r.commit, "0123456789abcdef0123456789abcdef01234567");
    CHECK_EQ(r.n_files, 12);
    CHECK_EQ(r.n_skipped, 4); /* ../escape, /etc/passwd, 7, the second config.json */
    int i = hx_hub_repo_find(&r, "model-00002-of-00002.safetensors");
    CHECK(i >= 0);
    CHECK_EQ(r.files[i].size, 5); /* from lfs.size when there is no size */
    CHECK_STR(r.files[i].sha256, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    CHECK_EQ(r.files[hx_hub_repo_find(&r, "tokenizer.json")].size, -1);
    CHECK_STR(r.files[hx_hub_repo_find(&r, "config.json")].sha256, "");
    hx_hub_repo_free(&r);
    CHECK_EQ(hx_alloc_live_bytes(), live);
    return 0;
}

static int test_bad_listings_are_format_errors(void)
{
    static const char *bad[] = { "", "not json", "[]", "{\"siblings\":{}}", "{\"sha\":\"x\"}",
                                 "{\"sha\":\"../../x\",\"siblings\":[]}",
                                 "{\"sha\":5,\"siblings\":[]}" };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        hx_hub_repo r;
        hx_err err = {0};
        if (parse(bad[k], &r, &err) != HX_E_FORMAT) CHECK_FAIL("listing '%s' accepted", bad[k]);
        CHECK_CONTAINS(err.msg, "hub file listing");
        CHECK(r.n_files == 0 && r.files == NULL);
    }
    hx_hub_repo r;
    hx_err err = {0};
    CHECK_EQ(parse("{\"siblings\":[]}", &r, &err), HX_OK); /* no sha: known from X-Repo-Commit later */
    CHECK_STR(r.commit, "");
    hx_hub_repo_free(&r);
    return 0;
}

static int test_listing_survives_allocation_failures(void)
{
    size_t live = hx_alloc_live_bytes();
    for (int64_t k = 0; k < 40; k++) {
        hx_hub_repo r;
        hx_err err = {0};
        hx_alloc_fail_after(k);
        hx_status st = parse(safetensors_listing, &r, &err);
        hx_alloc_fail_after(-1);
        if (st == HX_OK) hx_hub_repo_free(&r);
        else CHECK_EQ(st, HX_E_NOMEM);
        CHECK_EQ(hx_alloc_live_bytes(), live);
    }
    return 0;
}

static const char *plan_paths(const hx_hub_repo *r, const hx_hub_plan *p, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n_files && off < len; i++) {
        snprintf(buf + off, len - off, "%s%s", i ? " " : "", r->files[p->files[i]].path);
        off += strlen(buf + off);
    }
    return buf;
}

static int test_safetensors_plan_takes_the_model_files(void)
{
    hx_hub_repo r;
    hx_hub_plan p;
    hx_err err = {0};
    char b[1024];
    CHECK_EQ(parse(safetensors_listing, &r, &err), HX_OK);
    CHECK_EQ(hx_hub_plan_make(&r, "", &p, &err), HX_OK);
    CHECK_EQ(p.kind, HX_HUB_SAFETENSORS);
    CHECK_STR(r.files[p.index].path, "model.safetensors.index.json");
    CHECK_STR(plan_paths(&r, &p, b, sizeof b),
              "config.json generation_config.json tokenizer.json tokenizer_config.json "
              "chat_template.jinja model.safetensors.index.json consolidated.safetensors "
              "model-00002-of-00002.safetensors model-00001-of-00002.safetensors");
    /* the index names two shards: the consolidated copy goes */
    const char *index = "{\"metadata\":{},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
                        "\"b\":\"model-00002-of-00002.safetensors\",\"c\":\"model-00001-of-00002.safetensors\"}}";
    CHECK_EQ(hx_hub_plan_apply_index(&p, &r, index, strlen(index), &err), HX_OK);
    CHECK_STR(plan_paths(&r, &p, b, sizeof b),
              "config.json generation_config.json tokenizer.json tokenizer_config.json "
              "chat_template.jinja model.safetensors.index.json model-00001-of-00002.safetensors "
              "model-00002-of-00002.safetensors");
    const char *missing = "{\"weight_map\":{\"a\":\"model-00009-of-00009.safetensors\"}}";
    CHECK_EQ(hx_hub_plan_apply_index(&p, &r, missing, strlen(missing), &err), HX_E_NOTFOUND);
    CHECK_CONTAINS(err.msg, "model-00009-of-00009.safetensors");
    err = (hx_err){0};
    CHECK_EQ(hx_hub_plan_apply_index(&p, &r, "{]", 2, &err), HX_E_FORMAT);
    err = (hx_err){0};
    const char *escape = "{\"weight_map\":{\"a\":\"../x.safetensors\"}}";
    CHECK_EQ(hx_hub_plan_apply_index(&p, &r, escape, strlen(escape), &err), HX_E_FORMAT);
    hx_hub_plan_free(&p);
    hx_hub_repo_free(&r);
    return 0;
}

static const char *gguf_listing =
    "{\"sha\":\"abc\",\"siblings\":["
    "{\"rfilename\":\"README.md\"},"
    "{\"rfilename\":\"M-Q8_0.gguf\",\"size\":800},"
    "{\"rfilename\":\"M-Q4_0.gguf\",\"size\":420},"
    "{\"rfilename\":\"M-Q4_K_S.gguf\",\"size\":400},"
    "{\"rfilename\":\"M-Q4_K_M.gguf\",\"size\":450},"
    "{\"rfilename\":\"mmproj-M-Q4_K_M.gguf\",\"size\":50},"
    "{\"rfilename\":\"F16/M-F16-00002-of-00002.gguf\",\"size\":1000},"
    "{\"rfilename\":\"F16/M-F16-00001-of-00002.gguf\",\"size\":1000},"
    "{\"rfilename\":\"BF16/M-BF16-00001-of-00002.gguf\",\"size\":1000}"
    "]}";

/* Plans sel over listing; checks the status, and the files (or the message) it gives. */
static int plan_is(const char *listing, const char *sel, hx_status want, const char *want_text)
{
    hx_hub_repo r;
    hx_hub_plan p;
    hx_err err = {0};
    char b[1024];
    CHECK_EQ(parse(listing, &r, &err), HX_OK);
    hx_status st = hx_hub_plan_make(&r, sel, &p, &err);
    if (st != want) CHECK_FAIL("plan(%s) = %d (%s), want %d", sel, st, err.msg, want);
    if (st == HX_OK) {
        CHECK_EQ(p.kind, HX_HUB_GGUF);
        CHECK_STR(plan_paths(&r, &p, b, sizeof b), want_text);
        hx_hub_plan_free(&p);
    } else {
        CHECK_CONTAINS(err.msg, want_text);
        CHECK(p.files == NULL);
    }
    hx_hub_repo_free(&r);
    return 0;
}

static int test_gguf_choice(void)
{
    return plan_is(gguf_listing, "", HX_OK, "M-Q4_K_M.gguf") ||
           plan_is(gguf_listing, "q8_0", HX_OK, "M-Q8_0.gguf") ||
           plan_is(gguf_listing, "Q4_K", HX_E_AMBIGUOUS, "M-Q4_K_S.gguf, M-Q4_K_M.gguf") ||
           plan_is(gguf_listing, "Q4_K_M", HX_OK, "M-Q4_K_M.gguf") ||   /* not the mmproj */
           plan_is(gguf_listing, "F16", HX_OK,
                   "F16/M-F16-00001-of-00002.gguf F16/M-F16-00002-of-00002.gguf") ||
           plan_is(gguf_listing, "F16/M-F16-00002-of-00002.gguf", HX_OK,
                   "F16/M-F16-00001-of-00002.gguf F16/M-F16-00002-of-00002.gguf") ||
           plan_is(gguf_listing, "BF16", HX_E_NOTFOUND, "matches quant 'BF16'") || /* part 2 missing */
           plan_is(gguf_listing, "mmproj-M-Q4_K_M.gguf", HX_OK, "mmproj-M-Q4_K_M.gguf") ||
           plan_is(gguf_listing, "Q5_K_M", HX_E_NOTFOUND, "M-Q8_0.gguf (800 B)") ||
           plan_is(gguf_listing, "README.md", HX_E_INVALID, "not a GGUF file") ||
           plan_is(gguf_listing, "nope.gguf", HX_E_NOTFOUND, "no file 'nope.gguf'");
}

static int test_gguf_default_without_q4_k_m(void)
{
    const char *q4s = "{\"siblings\":[{\"rfilename\":\"a-Q8_0.gguf\",\"size\":9},"
                      "{\"rfilename\":\"a-Q4_1.gguf\",\"size\":5},{\"rfilename\":\"a-Q4_0.gguf\",\"size\":4},"
                      "{\"rfilename\":\"mmproj-a-Q4_0.gguf\",\"size\":1}]}";
    const char *unsized = "{\"siblings\":[{\"rfilename\":\"a-Q4_1.gguf\"},{\"rfilename\":\"a-Q4_0.gguf\"}]}";
    const char *no_q4 = "{\"siblings\":[{\"rfilename\":\"a-Q8_0.gguf\"},{\"rfilename\":\"a-F16.gguf\"}]}";
    const char *one = "{\"siblings\":[{\"rfilename\":\"a-Q8_0.gguf\"},{\"rfilename\":\"mmproj.gguf\"}]}";
    const char *none = "{\"siblings\":[{\"rfilename\":\"README.md\"},{\"rfilename\":\"x.bin\"}]}";
    const char *st_and_gguf = "{\"siblings\":[{\"rfilename\":\"config.json\"},"
                              "{\"rfilename\":\"model.safetensors\"},{\"rfilename\":\"m-Q8_0.gguf\"}]}";
    if (plan_is(q4s, "", HX_OK, "a-Q4_0.gguf") ||                 /* the smallest Q4 */
        plan_is(unsized, "", HX_E_AMBIGUOUS, "a-Q4_1.gguf, a-Q4_0.gguf") ||
        plan_is(no_q4, "", HX_E_AMBIGUOUS, "a-Q8_0.gguf, a-F16.gguf") ||
        plan_is(one, "", HX_OK, "a-Q8_0.gguf") ||
        plan_is(none, "", HX_E_NOTFOUND, "neither safetensors") ||
        plan_is(st_and_gguf, "Q8_0", HX_OK, "m-Q8_0.gguf"))
        return 1;
    hx_hub_repo r;
    hx_hub_plan p;
    hx_err err = {0};
    CHECK_EQ(parse(st_and_gguf, &r, &err), HX_OK);
    CHECK_EQ(hx_hub_plan_make(&r, "", &p, &err), HX_OK); /* no selector: the safetensors model */
    CHECK_EQ(p.kind, HX_HUB_SAFETENSORS);
    CHECK_EQ(p.index, -1);
    CHECK_EQ(p.n_files, 2);
    hx_hub_plan_free(&p);
    hx_hub_repo_free(&r);
    return 0;
}

static const check_case cases[] = {
    { "repo_ids", test_repo_ids },
    { "spec_parse", test_spec_parse },
    { "paths_that_could_leave_the_cache_are_refused", test_paths_that_could_leave_the_cache_are_refused },
    { "etags_and_commits", test_etags_and_commits },
    { "cache_names_as_huggingface_hub_writes_them", test_cache_names_as_huggingface_hub_writes_them },
    { "quant_matching", test_quant_matching },
    { "listing_is_parsed_and_unsafe_names_skipped", test_listing_is_parsed_and_unsafe_names_skipped },
    { "bad_listings_are_format_errors", test_bad_listings_are_format_errors },
    { "listing_survives_allocation_failures", test_listing_survives_allocation_failures },
    { "safetensors_plan_takes_the_model_files", test_safetensors_plan_takes_the_model_files },
    { "gguf_choice", test_gguf_choice },
    { "gguf_default_without_q4_k_m", test_gguf_default_without_q4_k_m },
};
CHECK_MAIN(cases)
