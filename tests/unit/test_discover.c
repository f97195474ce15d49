/* test_discover.c - model listing and name resolution over a HEARTH_HOME and a Hugging Face
 * cache laid out by the test. Discovery only looks at names and layout, so the model files here
 * are empty. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/path.h"
#include "check.h"
#include "format/discover.h"

static char root[256];

static void touch(const char *rel)
{
    char p[600], cmd[1300];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\" && : > '%s'", p, p);
    if (system(cmd) != 0) abort();
}

/* HEARTH_HOME with a GGUF file, a safetensors folder and a folder of GGUFs; an HF cache with a
 * safetensors repo (refs/main picks the snapshot) and a GGUF repo. */
static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/hx_test_disc_XXXXXX");
    if (!mkdtemp(root)) abort();
    touch("home/models/Qwen3-0.6B-Q8_0.gguf");
    touch("home/models/llama-3.2-1b/config.json");
    touch("home/models/bundle/Mistral-7B.Q4_K.gguf");
    touch("hf/models--HuggingFaceTB--SmolLM2-360M/snapshots/aaa/config.json");
    touch("hf/models--HuggingFaceTB--SmolLM2-360M/snapshots/bbb/config.json");
    touch("hf/models--Org--Gemma-GGUF/snapshots/ccc/gemma-2-2b-Q4_0.gguf");
    char p[600];
    snprintf(p, sizeof p, "%s/hf/models--HuggingFaceTB--SmolLM2-360M/refs", root);
    mkdir(p, 0755);
    strcat(p, "/main");
    FILE *f = fopen(p, "w");
    fputs("aaa\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/home", root);
    setenv("HEARTH_HOME", p, 1);
    snprintf(p, sizeof p, "%s/hf", root);
    setenv("HF_HUB_CACHE", p, 1);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

static int resolve(const char *arg, const char *want_suffix, hx_status want_st, const char *want_msg)
{
    char *path = NULL;
    hx_err err = {0};
    hx_status st = hx_discover_resolve(arg, &path, &err);
    CHECK_EQ(st, want_st);
    if (st == HX_OK) {
        size_t n = strlen(path), m = strlen(want_suffix);
        if (n < m || strcmp(path + n - m, want_suffix) != 0)
            CHECK_FAIL("resolve(%s) = %s, want ...%s", arg, path, want_suffix);
        hx_free(path);
    } else {
        CHECK_CONTAINS(err.msg, want_msg);
    }
    return 0;
}

static int test_list_finds_every_kind_of_local_model(void)
{
    setup();
    hx_local_models l;
    hx_err err = {0};
    CHECK_EQ(hx_discover_list(&l, &err), HX_OK);
    const char *want[] = {"bundle/Mistral-7B.Q4_K", "HuggingFaceTB/SmolLM2-360M", "llama-3.2-1b",
                          "Org/Gemma-GGUF:gemma-2-2b-Q4_0.gguf", "Qwen3-0.6B-Q8_0"};
    int rc = 0;
    if (l.n != 5) {
        for (int i = 0; i < l.n; i++) fprintf(stderr, "  %s\n", l.items[i].name);
        rc = 1;
    }
    for (int i = 0; i < l.n && i < 5 && !rc; i++)
        if (strcmp(l.items[i].name, want[i]) != 0) {
            fprintf(stderr, "item %d: %s, want %s\n", i, l.items[i].name, want[i]);
            rc = 1;
        }
    for (int i = 0; i < l.n && !rc; i++)
        if (strcmp(l.items[i].name, "HuggingFaceTB/SmolLM2-360M") == 0)
            rc = strstr(l.items[i].path, "/snapshots/aaa") ? 0 : 1; /* refs/main wins */
    hx_discover_free(&l);
    teardown();
    return rc;
}

static int test_resolution_rules(void)
{
    setup();
    int rc = resolve("huggingfacetb/smollm2-360m", "/snapshots/aaa", HX_OK, "") ||
             resolve("qwen3", "/models/Qwen3-0.6B-Q8_0.gguf", HX_OK, "") ||
             resolve("gemma", "/gemma-2-2b-Q4_0.gguf", HX_OK, "") ||
             resolve("LLAMA-3.2-1b", "/models/llama-3.2-1b", HX_OK, "") ||
             resolve("q", "", HX_E_AMBIGUOUS, "Qwen3-0.6B-Q8_0") ||
             resolve("nothing-like-this", "", HX_E_NOTFOUND, "not found") ||
             resolve("", "", HX_E_INVALID, "no model");
    /* An existing path is taken as it is, even if it also matches names. */
    char p[600];
    snprintf(p, sizeof p, "%s/home/models/bundle/Mistral-7B.Q4_K.gguf", root);
    rc = rc || resolve(p, "bundle/Mistral-7B.Q4_K.gguf", HX_OK, "");
    teardown();
    return rc;
}

static int test_missing_places_are_empty_not_errors(void)
{
    setenv("HEARTH_HOME", "/nonexistent/hearth", 1);
    setenv("HF_HUB_CACHE", "/nonexistent/hf", 1);
    hx_local_models l;
    hx_err err = {0};
    CHECK_EQ(hx_discover_list(&l, &err), HX_OK);
    CHECK_EQ(l.n, 0);
    hx_discover_free(&l);
    return resolve("anything", "", HX_E_NOTFOUND, "/nonexistent/hearth/models");
}

/* GGUF repos of the HF cache: split files are one model, quants in folders are found, and a
 * model of a repo is named by repo id (when it is the only one) or by ORG/NAME:QUANT. */
static int test_gguf_repos_resolve_by_repo_and_quant(void)
{
    snprintf(root, sizeof root, "/tmp/hx_test_disc_XXXXXX");
    if (!mkdtemp(root)) abort();
    touch("hf/models--O--Quants/snapshots/s1/m-Q4_K_M.gguf");
    touch("hf/models--O--Quants/snapshots/s1/m-Q8_0.gguf");
    touch("hf/models--O--Quants/snapshots/s1/F16/m-F16-00001-of-00002.gguf");
    touch("hf/models--O--Quants/snapshots/s1/F16/m-F16-00002-of-00002.gguf");
    touch("hf/models--O--Solo-GGUF/snapshots/s2/solo-Q4_0.gguf");
    touch("hf/models--O--Solo/snapshots/s3/config.json");
    touch("home/models/loose-Q8_0.gguf");
    char p[600];
    snprintf(p, sizeof p, "%s/home", root);
    setenv("HEARTH_HOME", p, 1);
    snprintf(p, sizeof p, "%s/hf", root);
    setenv("HF_HUB_CACHE", p, 1);

    hx_local_models l;
    hx_err err = {0};
    CHECK_EQ(hx_discover_list(&l, &err), HX_OK);
    const char *want[] = {"loose-Q8_0", "O/Quants:F16/m-F16-00001-of-00002.gguf",
                          "O/Quants:m-Q4_K_M.gguf", "O/Quants:m-Q8_0.gguf", "O/Solo",
                          "O/Solo-GGUF:solo-Q4_0.gguf"};
    CHECK_EQ(l.n, 6);
    for (int i = 0; i < l.n; i++) {
        CHECK_STR(l.items[i].name, want[i]);
        char id[128];
        if (i == 0) {
            CHECK(!hx_discover_repo_id(&l.items[i], id, sizeof id));
            CHECK(hx_str_ends_with(l.items[i].root, "/home/models/loose-Q8_0.gguf"));
        } else {
            CHECK(hx_discover_repo_id(&l.items[i], id, sizeof id));
            CHECK(strstr(l.items[i].root, "/hf/models--O--") != NULL);
            CHECK(!strstr(l.items[i].root, "/snapshots"));
        }
    }
    hx_discover_free(&l);
    int rc = resolve("O/Solo", "/snapshots/s3", HX_OK, "") ||
             resolve("o/solo-gguf", "/solo-Q4_0.gguf", HX_OK, "") ||
             resolve("O/Quants", "", HX_E_AMBIGUOUS, "holds 3 models") ||
             resolve("O/Quants:q8_0", "/s1/m-Q8_0.gguf", HX_OK, "") ||
             resolve("O/Quants:Q4_K_M", "/s1/m-Q4_K_M.gguf", HX_OK, "") ||
             resolve("O/Quants:Q4_K", "/s1/m-Q4_K_M.gguf", HX_OK, "") ||
             resolve("O/Quants:F16", "/F16/m-F16-00001-of-00002.gguf", HX_OK, "") ||
             resolve("O/Quants:m-Q8_0.gguf", "/s1/m-Q8_0.gguf", HX_OK, "") ||
             resolve("O/Quants:Q5_K", "", HX_E_NOTFOUND, "hearth get") ||
             resolve("q8_0", "", HX_E_AMBIGUOUS, "loose-Q8_0");
    teardown();
    return rc;
}

static const check_case cases[] = {
    { "list_finds_every_kind_of_local_model", test_list_finds_every_kind_of_local_model },
    { "resolution_rules", test_resolution_rules },
    { "missing_places_are_empty_not_errors", test_missing_places_are_empty_not_errors },
    { "gguf_repos_resolve_by_repo_and_quant", test_gguf_repos_resolve_by_repo_and_quant },
};
CHECK_MAIN(cases)
