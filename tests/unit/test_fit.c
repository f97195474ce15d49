/* test_fit.c - the memory contract (engine/fit.h) on the starter model (SmolLM2-135M): the terms
 * add up, the KV pool scales with context, batch and element type exactly, the largest safe
 * context is the largest, a tiny budget fits nothing, the numbers are deterministic, the
 * mirrored allocation sizes match what loading the model really allocates, and a fit of a GPU's
 * memory counts what the CUDA backend uploads against the GPU's free memory. Skips with a message
 * when the starter model is not installed. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/alloc.h"
#include "base/membw.h"
#include "check.h"
#include "engine/fit.h"
#include "engine/sequence.h"
#include "model/model.h"

/* Opens the starter model's description, or returns NULL after a skip line. */
static hx_model_files *starter(void)
{
    const char *path = check_starter_model();
    if (!path) return NULL;
    hx_model_files *mf = NULL;
    hx_err err = {0};
    if (hx_model_files_open(path, &mf, &err) != HX_OK) {
        fprintf(stderr, "cannot open the starter model: %s\n", err.msg);
        abort();
    }
    return mf;
}

static hx_fit_report fit(const hx_model_files *mf, int32_t ctx, int32_t batch, hx_kv_dtype kv,
                         uint64_t budget)
{
    hx_fit_params p = hx_fit_params_default();
    p.n_ctx = ctx;
    p.n_batch = batch;
    p.kv_type = kv;
    p.budget_bytes = budget;
    p.n_threads = 2;
    hx_fit_report r;
    hx_err err = {0};
    HX_ASSERT(hx_fit_compute(mf, &p, &r, &err) == HX_OK);
    return r;
}

#define GIB ((uint64_t)1 << 30)

static int test_terms_add_up_to_total(void)
{
    hx_model_files *mf = starter();
    if (!mf) return 0;
    const int32_t ctxs[] = {16, 512, 4096, 8192};
    for (size_t i = 0; i < HX_COUNTOF(ctxs); i++) {
        const hx_fit_report r = fit(mf, ctxs[i], 3, HX_KV_F16, 64 * GIB);
        CHECK_EQ(r.total_bytes, r.weights_bytes + r.kv_bytes + r.scratch_bytes + r.embed_bytes +
                                    r.load_bytes + r.overhead_bytes);
        CHECK(r.weights_bytes > 90u << 20 && r.weights_bytes < 100u << 20); /* 92.1 MiB of tensors */
        CHECK(r.weights_packed_bytes <= r.weights_bytes);
        CHECK(r.scratch_bytes <= r.scratch_reserved_bytes);
        CHECK(r.fits && r.n_ctx == ctxs[i] && r.n_batch == 3);
    }
    hx_model_files_close(mf);
    return 0;
}

static int test_kv_scales_linearly_with_ctx_and_batch(void)
{
    hx_model_files *mf = starter();
    if (!mf) return 0;
    const hx_fit_report a = fit(mf, 512, 1, HX_KV_F16, 64 * GIB);
    const hx_fit_report b = fit(mf, 1024, 1, HX_KV_F16, 64 * GIB);
    const hx_fit_report c = fit(mf, 1024, 4, HX_KV_F16, 64 * GIB);
    /* 30 layers x 3 kv heads x 64 x (K and V) x 2 bytes */
    CHECK_EQ(a.kv_bytes_per_token, 30 * 3 * 64 * 2 * 2);
    CHECK_EQ(a.kv_bytes, 512 * a.kv_bytes_per_token);
    CHECK_EQ(b.kv_bytes, 2 * a.kv_bytes);
    CHECK_EQ(c.kv_bytes, 4 * b.kv_bytes);
    /* A context is held in whole blocks of 16 positions. */
    CHECK_EQ(fit(mf, 513, 1, HX_KV_F16, 64 * GIB).kv_bytes, 528 * a.kv_bytes_per_token);
    hx_model_files_close(mf);
    return 0;
}

static int test_quantized_kv_is_smaller_by_its_ratio(void)
{
    hx_model_files *mf = starter();
    if (!mf) return 0;
    const hx_fit_report f16 = fit(mf, 2048, 8, HX_KV_F16, 64 * GIB);
    const hx_fit_report q8 = fit(mf, 2048, 8, HX_KV_Q8, 64 * GIB);
    const hx_fit_report q4 = fit(mf, 2048, 8, HX_KV_Q4, 64 * GIB);
    CHECK(q8.kv_bytes < f16.kv_bytes && q4.kv_bytes < q8.kv_bytes);
    CHECK_EQ(q8.kv_bytes * 64, f16.kv_bytes * 36); /* bytes per 32 elements: 64, 36, 20 */
    CHECK_EQ(q4.kv_bytes * 36, q8.kv_bytes * 20);
    CHECK_EQ(f16.total_bytes - q8.total_bytes, f16.kv_bytes - q8.kv_bytes); /* only kv moves */
    hx_model_files_close(mf);
    return 0;
}

static int test_max_ctx_is_the_largest_that_fits(void)
{
    hx_model_files *mf = starter();
    if (!mf) return 0;
    /* A budget between the totals at 1000 and 3000 positions, for 2 and 4 sequences. */
    const int32_t batches[] = {2, 4};
    for (size_t i = 0; i < HX_COUNTOF(batches); i++) {
        const int32_t nb = batches[i];
        const uint64_t budget = (fit(mf, 1000, nb, HX_KV_F16, GIB).total_bytes +
                                 fit(mf, 3000, nb, HX_KV_F16, GIB).total_bytes) / 2;
        const hx_fit_report r = fit(mf, 512, nb, HX_KV_F16, budget);
        CHECK(r.max_ctx > 1000 && r.max_ctx < 3000 && r.max_ctx % 16 == 0);
        CHECK(fit(mf, r.max_ctx, nb, HX_KV_F16, budget).fits);
        CHECK(!fit(mf, r.max_ctx + 16, nb, HX_KV_F16, budget).fits);
    }
    /* With room to spare it stops at the trained context. */
    const hx_fit_report big = fit(mf, 512, 1, HX_KV_F16, 64 * GIB);
    CHECK_EQ(big.max_ctx, 8192);
    CHECK_EQ(big.n_ctx_train, 8192);
    hx_model_files_close(mf);
    return 0;
}

static int test_tiny_budget_does_not_fit(void)
{
    hx_model_files *mf = starter();
    if (!mf) return 0;
    const hx_fit_report r = fit(mf, 512, 1, HX_KV_F16, 16u << 20);
    CHECK(!r.fits);
    CHECK(r.total_bytes > r.budget_bytes);
    CHECK_EQ(r.max_ctx, 0);
    hx_model_files_close(mf);
    return 0;
}

static int test_defaults_and_bad_parameters(void)
{
    hx_model_files *mf = starter();
    if (!mf) return 0;
    hx_fit_report r;
    hx_err err = {0};
    CHECK_EQ(hx_fit_compute(mf, NULL, &r, &err), HX_OK);
    CHECK_EQ(r.n_ctx, hx_sequence_default_ctx(&mf->hp));
    CHECK_EQ(r.n_batch, 8);
    CHECK(r.budget_bytes > 0 && r.budget_bytes == hx_fit_default_budget());
    CHECK(r.bandwidth_bytes_per_s == 0 && r.decode_tok_s == 0);
    hx_fit_params p = hx_fit_params_default();
    p.n_ctx = -1;
    CHECK_EQ(hx_fit_compute(mf, &p, &r, &err), HX_E_INVALID);
    p = hx_fit_params_default();
    p.kv_type = HX_KV_DTYPE_COUNT;
    hx_err err2 = {0};
    CHECK_EQ(hx_fit_compute(mf, &p, &r, &err2), HX_E_INVALID);
    CHECK(err2.msg[0] != '\0');
    hx_model_files_close(mf);
    return 0;
}

static int test_same_input_same_numbers(void)
{
    hx_model_files *mf = starter();
    if (!mf) return 0;
    hx_fit_params p = hx_fit_params_default();
    p.bandwidth_bytes_per_s = 20e9;
    p.n_threads = 4;
    hx_fit_report a, b;
    hx_err err = {0};
    memset(&a, 0x55, sizeof a); /* padding too: the comparison is of whole structs */
    memset(&b, 0x55, sizeof b);
    CHECK_EQ(hx_fit_compute(mf, &p, &a, &err), HX_OK);
    CHECK_EQ(hx_fit_compute(mf, &p, &b, &err), HX_OK);
    CHECK(a.total_bytes == b.total_bytes && a.max_ctx == b.max_ctx &&
          a.read_bytes_per_token == b.read_bytes_per_token && a.decode_tok_s == b.decode_tok_s);
    /* decode reads every weight once, plus the KV of half the context on average */
    CHECK(a.read_bytes_per_token > a.weights_bytes);
    CHECK_NEAR(a.decode_tok_s, 20e9 / (double)a.read_bytes_per_token, 1e-12);
    CHECK(a.decode_tok_s_batch > a.decode_tok_s);
    hx_model_files_close(mf);
    return 0;
}

/* The mirrored sizes are the real ones: binding the model and a sequence allocates the packed
 * weights, the reserved scratch (less the sampler, made per generation) and the KV pool. The
 * slack is the packed tensors' alignment (2 MiB for the 29 MiB output projection, 64 bytes for
 * the others) and their small descriptors. */
static int test_reserved_sizes_match_the_allocator(void)
{
    hx_model_files *mf = starter();
    if (!mf) return 0;
    const hx_fit_report r = fit(mf, 1024, 1, HX_KV_F16, 64 * GIB);
    const size_t before = hx_alloc_live_bytes();
    hx_backend *be = NULL;
    hx_llm *llm = NULL;
    hx_sequence *seq = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_cpu_backend_create(2, 0, &be, &err), HX_OK);
    const size_t after_be = hx_alloc_live_bytes();
    CHECK_EQ(hx_llm_open(mf, be, HX_SEQUENCE_STEP_TOKENS, &llm, &err), HX_OK);
    CHECK_EQ(hx_sequence_init(llm, NULL, 1024, HX_KV_F16, &seq, &err), HX_OK);
    const size_t delta = hx_alloc_live_bytes() - after_be;
    const uint64_t want = r.weights_packed_bytes + r.kv_bytes + r.scratch_reserved_bytes -
                          (uint64_t)mf->hp.n_vocab * 12;
    if (!(delta + (64u << 10) >= want && delta <= want + (3u << 20)))
        CHECK_FAIL("allocated %zu bytes, fit reserves %llu (+ alignment up to 3 MiB)", delta,
                   (unsigned long long)want);
    CHECK(after_be - before < (1u << 20)); /* the backend itself: its state and thread pool */
    hx_sequence_free(seq);
    hx_llm_close(llm);
    be->destroy(be);
    hx_model_files_close(mf);
    return 0;
}

/* The fit of a GPU's memory: p with a device of total bytes, free of them free. */
static hx_fit_report fit_gpu(const hx_model_files *mf, int32_t ctx, int32_t batch, uint64_t budget,
                             uint64_t total, uint64_t free_bytes)
{
    hx_fit_params p = hx_fit_params_default();
    p.n_ctx = ctx;
    p.n_batch = batch;
    p.budget_bytes = budget;
    p.n_threads = 2;
    p.device_total_bytes = total;
    p.device_free_bytes = free_bytes;
    hx_fit_report r;
    hx_err err = {0};
    HX_ASSERT(hx_fit_compute(mf, &p, &r, &err) == HX_OK);
    return r;
}

/* On a GPU the weights are the tensors as uploaded: every byte of the file's tensors (the
 * starter's norms are f32 already, the form the GPU keeps them in, and its embedding table is
 * the tied output projection, uploaded once), nothing repacked, nothing mapped. The KV pool is
 * the same as the CPU's; the host-only terms are 0. */
static int test_gpu_fit_counts_what_is_uploaded(void)
{
    hx_model_files *mf = starter();
    if (!mf) return 0;
    uint64_t file_bytes = 0;
    for (int64_t i = 0; i < mf->n_tensors; i++) {
        const hx_tensor *t = &mf->tensors[i].t;
        if (t->n_dims == 1) CHECK_EQ(t->dtype, HX_DT_F32);
        file_bytes += hx_tensor_data_bytes(t);
    }
    const hx_fit_report cpu = fit(mf, 2048, 3, HX_KV_F16, 64 * GIB);
    const hx_fit_report r = fit_gpu(mf, 2048, 3, 64 * GIB, 80 * GIB, 70 * GIB);
    CHECK_EQ(r.weights_bytes, file_bytes);
    CHECK_EQ(r.weights_packed_bytes, 0);
    CHECK(!r.repacked);
    CHECK_EQ(r.kv_bytes, cpu.kv_bytes);
    CHECK_EQ(r.embed_bytes, 0);
    CHECK_EQ(r.load_bytes, 0);
    CHECK(r.overhead_bytes > 0);
    CHECK_EQ(r.scratch_bytes, r.scratch_reserved_bytes); /* device memory is committed whole */
    CHECK_EQ(r.total_bytes, r.weights_bytes + r.kv_bytes + r.scratch_bytes + r.embed_bytes +
                                r.load_bytes + r.overhead_bytes);
    CHECK_EQ(r.device_total_bytes, 80 * GIB);
    CHECK_EQ(r.device_free_bytes, 70 * GIB);
    CHECK(r.fits && r.max_ctx == 8192);
    /* The CPU's report says nothing of a device. */
    CHECK(cpu.device_total_bytes == 0 && cpu.device_free_bytes == 0);
    hx_model_files_close(mf);
    return 0;
}

/* With no budget given, a GPU's is 95% of its free memory (of its total when the free is not
 * known), not the host's RAM; the largest context is the largest that fits it. */
static int test_gpu_budget_is_its_free_memory(void)
{
    hx_model_files *mf = starter();
    if (!mf) return 0;
    const hx_fit_report a = fit_gpu(mf, 512, 1, 0, 80 * GIB, 10 * GIB);
    CHECK_EQ(a.budget_bytes, hx_fit_default_device_budget(10 * GIB, 80 * GIB));
    CHECK_EQ(a.budget_bytes, 10 * GIB / 100 * 95);
    CHECK_EQ(fit_gpu(mf, 512, 1, 0, 80 * GIB, 0).budget_bytes, 80 * GIB / 100 * 95);
    /* Free memory between the totals at 1000 and 3000 positions of 4 sequences. */
    const uint64_t lo = fit_gpu(mf, 1000, 4, GIB, GIB, GIB).total_bytes;
    const uint64_t hi = fit_gpu(mf, 3000, 4, GIB, GIB, GIB).total_bytes;
    const uint64_t free_bytes = (lo + hi) / 2 / 95 * 100;
    const hx_fit_report r = fit_gpu(mf, 512, 4, 0, 80 * GIB, free_bytes);
    CHECK(r.max_ctx > 1000 && r.max_ctx < 3000 && r.max_ctx % 16 == 0);
    CHECK(fit_gpu(mf, r.max_ctx, 4, 0, 80 * GIB, free_bytes).fits);
    CHECK(!fit_gpu(mf, r.max_ctx + 16, 4, 0, 80 * GIB, free_bytes).fits);
    /* Weights alone over the free memory: nothing fits. */
    const hx_fit_report none = fit_gpu(mf, 512, 1, 0, 80 * GIB, 64u << 20);
    CHECK(!none.fits && none.max_ctx == 0);
    hx_model_files_close(mf);
    return 0;
}

static int test_bandwidth_probe_is_plausible(void)
{
    const double bw = hx_membw_read(1, 50);
    CHECK(bw > 1e8 && bw < 1e13); /* 0.1 GB/s .. 10 TB/s */
    return 0;
}

static const check_case cases[] = {
    { "terms_add_up_to_total", test_terms_add_up_to_total },
    { "kv_scales_linearly_with_ctx_and_batch", test_kv_scales_linearly_with_ctx_and_batch },
    { "quantized_kv_is_smaller_by_its_ratio", test_quantized_kv_is_smaller_by_its_ratio },
    { "max_ctx_is_the_largest_that_fits", test_max_ctx_is_the_largest_that_fits },
    { "tiny_budget_does_not_fit", test_tiny_budget_does_not_fit },
    { "defaults_and_bad_parameters", test_defaults_and_bad_parameters },
    { "same_input_same_numbers", test_same_input_same_numbers },
    { "reserved_sizes_match_the_allocator", test_reserved_sizes_match_the_allocator },
    { "gpu_fit_counts_what_is_uploaded", test_gpu_fit_counts_what_is_uploaded },
    { "gpu_budget_is_its_free_memory", test_gpu_budget_is_its_free_memory },
    { "bandwidth_probe_is_plausible", test_bandwidth_probe_is_plausible },
};
CHECK_MAIN(cases)
