/* test_model_files.c - the loader front door on folders written by the test, and on the starter
 * model when it is present. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/f16.h"
#include "check.h"
#include "format/model_files.h"

/* ---- fixtures: a tiny Llama folder (hidden 32, 1 layer, vocab 16) ---- */

static char dir[256];

static const char *CONFIG =
    "{\"model_type\": \"llama\", \"hidden_size\": 32, \"intermediate_size\": 64, "
    "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
    "\"vocab_size\": 16, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-5, "
    "\"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
    "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
    "\"original_max_position_embeddings\": 8192}%s}";

static void write_file(const char *name, const void *data, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static void write_config(const char *extra)
{
    char buf[2048];
    int n = snprintf(buf, sizeof buf, CONFIG, extra);
    write_file("config.json", buf, (size_t)n);
}

typedef struct {
    const char *name, *dtype;
    int64_t rows, cols; /* cols 0: 1-D of rows elements */
    size_t elem;        /* bytes per element */
} spec;

/* Writes model.safetensors holding the tensors in `s` (data filled with a pattern; F16 weights
 * all 1.0 so dequantized values are predictable). */
static void write_safetensors(const spec *s, int n, long truncate_to)
{
    char header[8192] = "{";
    size_t off = 0, hl = 1;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)(s[i].rows * (s[i].cols ? s[i].cols : 1)) * s[i].elem;
        if (s[i].cols)
            hl += (size_t)snprintf(header + hl, sizeof header - hl,
                                   "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                                   i ? "," : "", s[i].name, s[i].dtype, (long long)s[i].rows,
                                   (long long)s[i].cols, off, off + bytes);
        else
            hl += (size_t)snprintf(header + hl, sizeof header - hl,
                                   "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],\"data_offsets\":[%zu,%zu]}",
                                   i ? "," : "", s[i].name, s[i].dtype, (long long)s[i].rows, off,
                                   off + bytes);
        off += bytes;
    }
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "}");
    size_t total = 8 + hl + off;
    unsigned char *buf = calloc(1, total);
    uint64_t h = hl;
    memcpy(buf, &h, 8);
    memcpy(buf + 8, header, hl);
    /* data: every 16-bit value 0x3C00 (1.0 in f16); u32 words 0x76543210 (nibbles 0..7) */
    size_t p = 8 + hl;
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)(s[i].rows * (s[i].cols ? s[i].cols : 1));
        for (size_t k = 0; k < cnt; k++, p += s[i].elem) {
            if (s[i].elem == 2) { uint16_t v = 0x3C00; memcpy(buf + p, &v, 2); }
            else if (s[i].elem == 4) { uint32_t v = 0x76543210u; memcpy(buf + p, &v, 4); }
        }
    }
    write_file("model.safetensors", buf, truncate_to >= 0 ? (size_t)truncate_to : total);
    free(buf);
}

static const spec LLAMA_F16[] = {
    {"model.embed_tokens.weight", "F16", 16, 32, 2},
    {"model.norm.weight", "F16", 32, 0, 2},
    {"model.layers.0.input_layernorm.weight", "F16", 32, 0, 2},
    {"model.layers.0.post_attention_layernorm.weight", "F16", 32, 0, 2},
    {"model.layers.0.self_attn.q_proj.weight", "F16", 32, 32, 2},
    {"model.layers.0.self_attn.k_proj.weight", "F16", 16, 32, 2},
    {"model.layers.0.self_attn.v_proj.weight", "F16", 16, 32, 2},
    {"model.layers.0.self_attn.o_proj.weight", "F16", 32, 32, 2},
    {"model.layers.0.mlp.gate_proj.weight", "F16", 64, 32, 2},
    {"model.layers.0.mlp.up_proj.weight", "F16", 64, 32, 2},
    {"model.layers.0.mlp.down_proj.weight", "F16", 32, 64, 2},
};
#define N_LLAMA ((int)(sizeof LLAMA_F16 / sizeof LLAMA_F16[0]))

static void fresh_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/hx_test_mf_XXXXXX");
    if (!mkdtemp(dir)) abort();
}

static void remove_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static int open_expect_error(const char *want_in_msg)
{
    hx_model_files *mf = NULL;
    hx_err err = {0};
    hx_status st = hx_model_files_open(dir, &mf, &err);
    remove_dir();
    if (st == HX_OK) {
        hx_model_files_close(mf);
        CHECK_FAIL("expected an error containing \"%s\"", want_in_msg);
    }
    CHECK(mf == NULL);
    CHECK_CONTAINS(err.msg, want_in_msg);
    return 0;
}

/* ---- cases ---- */

static int test_hf_folder_opens_with_normalised_names(void)
{
    fresh_dir();
    write_config("");
    write_safetensors(LLAMA_F16, N_LLAMA, -1);
    hx_model_files *mf = NULL;
    hx_err err = {0};
    hx_status st = hx_model_files_open(dir, &mf, &err);
    remove_dir();
    if (st != HX_OK) CHECK_FAIL("open: %s", err.msg);
    CHECK_EQ(mf->format, HX_FMT_SAFETENSORS);
    CHECK_STR(mf->hp.arch, "llama");
    CHECK_EQ(mf->hp.n_layer, 1);
    CHECK_EQ(mf->hp.d_model, 32);
    CHECK_EQ(mf->hp.n_kv_head, 2);
    CHECK_EQ(mf->hp.d_head, 8);
    CHECK_EQ(mf->hp.rope_scaling, HX_ROPE_SCALING_LLAMA3);
    CHECK_NEAR(mf->hp.rope_factor, 8.0, 1e-6);
    CHECK_EQ(mf->hp.rope_orig_ctx, 8192);
    CHECK_EQ(mf->hp.rope_layout, HX_ROPE_HALVES);
    CHECK(mf->hp.tie_embeddings);
    CHECK(!mf->hp.qk_norm);
    CHECK_EQ(mf->n_tensors, N_LLAMA);
    const hx_tensor_info *k = hx_model_files_find(mf, "blk.0.attn_k.weight");
    CHECK(k != NULL);
    CHECK_STR(k->src_name, "model.layers.0.self_attn.k_proj.weight");
    CHECK_EQ(k->t.shape[0], 16);
    CHECK_EQ(k->t.shape[1], 32);
    float row[32];
    hx_tensor_dequant_row(&k->t, 3, row);
    CHECK_NEAR(row[31], 1.0, 0);
    CHECK_EQ(hx_model_files_main_dtype(mf), HX_DT_F16);
    int64_t want = 16 * 32 + 32 * 3 + 32 * 32 * 2 + 16 * 32 * 2 + 64 * 32 * 3;
    CHECK_EQ(hx_model_files_n_params(mf), want);
    hx_model_files_close(mf);
    return 0;
}

static int test_mlx_weights_join_their_scales_and_biases(void)
{
    fresh_dir();
    write_config(", \"quantization\": {\"group_size\": 32, \"bits\": 4}");
    /* q_proj packed: 32 rows × (32/8) words; scales/biases: 32 rows × 1 group */
    spec s[N_LLAMA + 2];
    memcpy(s, LLAMA_F16, sizeof LLAMA_F16);
    s[4] = (spec){"model.layers.0.self_attn.q_proj.weight", "U32", 32, 4, 4};
    s[N_LLAMA] = (spec){"model.layers.0.self_attn.q_proj.scales", "F16", 32, 1, 2};
    s[N_LLAMA + 1] = (spec){"model.layers.0.self_attn.q_proj.biases", "F16", 32, 1, 2};
    write_safetensors(s, N_LLAMA + 2, -1);
    hx_model_files *mf = NULL;
    hx_err err = {0};
    hx_status st = hx_model_files_open(dir, &mf, &err);
    remove_dir();
    if (st != HX_OK) CHECK_FAIL("open: %s", err.msg);
    CHECK_EQ(mf->format, HX_FMT_MLX);
    CHECK_EQ(mf->n_tensors, N_LLAMA); /* scales and biases are not separate tensors */
    const hx_tensor_info *q = hx_model_files_find(mf, "blk.0.attn_q.weight");
    CHECK(q != NULL);
    CHECK_EQ(q->t.dtype, HX_DT_MLX4);
    CHECK_EQ(q->t.shape[1], 32);
    CHECK_EQ(q->t.group_size, 32);
    /* words 0x76543210 hold q = 0,1,..,7; scale 1, bias 1 → w = q + 1 */
    float row[32];
    hx_tensor_dequant_row(&q->t, 5, row);
    for (int i = 0; i < 32; i++) CHECK_NEAR(row[i], (double)(i % 8) + 1.0, 0);
    CHECK_EQ(hx_model_files_n_bytes(mf) > 0, 1);
    hx_model_files_close(mf);
    return 0;
}

static int test_missing_config_field_is_named(void)
{
    fresh_dir();
    const char *cfg = "{\"model_type\": \"llama\", \"num_hidden_layers\": 1}";
    write_file("config.json", cfg, strlen(cfg));
    write_safetensors(LLAMA_F16, N_LLAMA, -1);
    return open_expect_error("hidden_size");
}

static int test_unknown_architecture_is_refused_with_the_list(void)
{
    fresh_dir();
    const char *cfg = "{\"model_type\": \"bloom\"}";
    write_file("config.json", cfg, strlen(cfg));
    write_safetensors(LLAMA_F16, N_LLAMA, -1);
    return open_expect_error("unknown architecture 'bloom' (model_type); supported: llama");
}

static int test_embedding_disagreeing_with_config_is_an_error(void)
{
    fresh_dir();
    write_config("");
    spec s[N_LLAMA];
    memcpy(s, LLAMA_F16, sizeof LLAMA_F16);
    s[0].rows = 17;
    write_safetensors(s, N_LLAMA, -1);
    return open_expect_error("expected [16, 32]");
}

static int test_mlx_weight_without_biases_is_an_error(void)
{
    fresh_dir();
    write_config(", \"quantization\": {\"group_size\": 32, \"bits\": 4}");
    spec s[N_LLAMA + 1];
    memcpy(s, LLAMA_F16, sizeof LLAMA_F16);
    s[4] = (spec){"model.layers.0.self_attn.q_proj.weight", "U32", 32, 4, 4};
    s[N_LLAMA] = (spec){"model.layers.0.self_attn.q_proj.scales", "F16", 32, 1, 2};
    write_safetensors(s, N_LLAMA + 1, -1);
    return open_expect_error("q_proj.biases");
}

static int test_unsupported_dtype_names_tensor(void)
{
    fresh_dir();
    write_config("");
    spec s[N_LLAMA];
    memcpy(s, LLAMA_F16, sizeof LLAMA_F16);
    s[2].dtype = "I16";
    write_safetensors(s, N_LLAMA, -1);
    return open_expect_error("unsupported dtype I16 in tensor model.layers.0.input_layernorm.weight");
}

static int test_truncated_safetensors_is_an_error_naming_the_file(void)
{
    for (long cut = 0; cut < 400; cut += 37) {
        fresh_dir();
        write_config("");
        write_safetensors(LLAMA_F16, N_LLAMA, cut);
        if (open_expect_error("model.safetensors")) CHECK_FAIL("cut at %ld", cut);
    }
    return 0;
}

static int test_folder_without_config_is_not_a_model(void)
{
    fresh_dir();
    write_safetensors(LLAMA_F16, N_LLAMA, -1);
    return open_expect_error("not a model folder");
}

static int test_allocation_failures_are_clean(void)
{
    fresh_dir();
    write_config(", \"quantization\": {\"group_size\": 32, \"bits\": 4}");
    spec s[N_LLAMA + 2];
    memcpy(s, LLAMA_F16, sizeof LLAMA_F16);
    s[4] = (spec){"model.layers.0.self_attn.q_proj.weight", "U32", 32, 4, 4};
    s[N_LLAMA] = (spec){"model.layers.0.self_attn.q_proj.scales", "F16", 32, 1, 2};
    s[N_LLAMA + 1] = (spec){"model.layers.0.self_attn.q_proj.biases", "F16", 32, 1, 2};
    write_safetensors(s, N_LLAMA + 2, -1);
    const size_t live = hx_alloc_live_bytes();
    for (int k = 0;; k++) {
        hx_model_files *mf = NULL;
        hx_err err = {0};
        hx_alloc_fail_after(k);
        hx_status st = hx_model_files_open(dir, &mf, &err);
        hx_alloc_fail_after(-1);
        if (st == HX_OK) {
            hx_model_files_close(mf);
            CHECK_EQ(hx_alloc_live_bytes(), live);
            break;
        }
        if (st != HX_E_NOMEM) {
            remove_dir();
            CHECK_FAIL("failure %d gave status %d: %s", k, st, err.msg);
        }
        CHECK_EQ(hx_alloc_live_bytes(), live);
        CHECK(k < 10000);
    }
    remove_dir();
    return 0;
}

static int test_starter_model_description(void)
{
    const char *home = getenv("HEARTH_HOME");
    char path[512];
    if (home && *home) snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else snprintf(path, sizeof path, "%s/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                  getenv("HOME"));
    if (access(path, R_OK) != 0) {
        printf("skip: starter model not found at %s\n", path);
        return 0;
    }
    hx_model_files *mf = NULL;
    hx_err err = {0};
    if (hx_model_files_open(path, &mf, &err) != HX_OK) CHECK_FAIL("open: %s", err.msg);
    CHECK_EQ(mf->format, HX_FMT_GGUF);
    CHECK_STR(mf->hp.arch, "llama");
    CHECK_EQ(mf->hp.n_layer, 30);
    CHECK_EQ(mf->hp.d_model, 576);
    CHECK_EQ(mf->hp.n_head, 9);
    CHECK_EQ(mf->hp.n_kv_head, 3);
    CHECK_EQ(mf->hp.n_vocab, 49152);
    CHECK_EQ(mf->hp.rope_layout, HX_ROPE_PAIRS);
    CHECK(mf->hp.tie_embeddings);
    CHECK_EQ(hx_model_files_main_dtype(mf), HX_DT_Q4_1);
    const int64_t n = hx_model_files_n_params(mf);
    CHECK(n > 130000000 && n < 140000000);
    CHECK(mf->chat_template != NULL);
    CHECK_STR(mf->tokenizer_kind, "gpt2");
    /* GGUF shapes are reversed into outermost-first order. */
    const hx_tensor_info *k = hx_model_files_find(mf, "blk.0.attn_k.weight");
    CHECK(k && k->t.shape[0] == 192 && k->t.shape[1] == 576);
    float row[576];
    hx_tensor_dequant_row(&k->t, 191, row);
    for (int i = 0; i < 576; i++) CHECK(row[i] == row[i] && fabsf(row[i]) < 100.0f);
    hx_model_files_close(mf);
    return 0;
}

/* ---- Gemma 2/3 and Phi-3 hyper-parameters (issue 8) ---- */

/* Opens the folder holding config.json `cfg` and one embedding [16, 32] named `emb`. */
static int open_with(const char *cfg, const char *emb, hx_model_files **mf, hx_err *err)
{
    fresh_dir();
    write_file("config.json", cfg, strlen(cfg));
    const spec s[] = {{emb, "F16", 16, 32, 2}};
    write_safetensors(s, 1, -1);
    const hx_status st = hx_model_files_open(dir, mf, err);
    remove_dir();
    return st;
}

/* A multimodal Gemma 3 config names only what differs from Gemma3TextConfig (as the 4B model's
 * does); the rest takes transformers' defaults, and the pattern makes every 6th layer global. */
static int test_gemma3_text_config_takes_the_family_defaults(void)
{
    hx_model_files *mf = NULL;
    hx_err err = {0};
    CHECK_EQ(open_with("{\"model_type\": \"gemma3\", \"text_config\": {\"model_type\": "
                       "\"gemma3_text\", \"hidden_size\": 32, \"intermediate_size\": 64, "
                       "\"num_hidden_layers\": 12, \"vocab_size\": 16, \"sliding_window\": 8, "
                       "\"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}}}",
                       "language_model.model.embed_tokens.weight", &mf, &err), HX_OK);
    const hx_hparams *hp = &mf->hp;
    CHECK_STR(hp->arch, "gemma3");
    CHECK_EQ(hp->n_head, 8);
    CHECK_EQ(hp->n_kv_head, 4);
    CHECK_EQ(hp->d_head, 256);
    CHECK_EQ(hp->n_ctx_train, 131072);
    CHECK_NEAR(hp->attn_scale, 1.0 / 16.0, 1e-7);
    CHECK_NEAR(hp->rope_theta, 1e6, 1e-3);
    CHECK_NEAR(hp->rope_theta_swa, 1e4, 1e-3);
    CHECK_EQ(hp->rope_scaling, HX_ROPE_SCALING_LINEAR);
    CHECK_NEAR(hp->rope_factor, 8.0, 1e-6);
    CHECK(hp->norm_plus_one);
    CHECK_EQ(hp->attn_softcap, 0);
    CHECK_EQ(hp->final_softcap, 0);
    for (int i = 0; i < 12; i++) CHECK_EQ(hx_hparams_layer_window(hp, i), (i + 1) % 6 ? 8 : 0);
    CHECK(hx_model_files_find(mf, "token_embd.weight") != NULL);
    hx_model_files_close(mf);
    return 0;
}

/* Gemma 2: layer_types wins over the alternation; the caps default to 50 and 30 when absent and
 * a null turns one off; query_pre_attn_scalar sets the query scale. */
static int test_gemma2_layer_types_and_caps(void)
{
    hx_model_files *mf = NULL;
    hx_err err = {0};
    CHECK_EQ(open_with("{\"model_type\": \"gemma2\", \"hidden_size\": 32, \"intermediate_size\": 64,"
                       " \"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"head_dim\": 16, "
                       "\"vocab_size\": 16, \"sliding_window\": 5, \"query_pre_attn_scalar\": 64, "
                       "\"final_logit_softcapping\": null, \"layer_types\": [\"full_attention\", "
                       "\"sliding_attention\", \"sliding_attention\"]}",
                       "model.embed_tokens.weight", &mf, &err), HX_OK);
    const hx_hparams *hp = &mf->hp;
    CHECK_EQ(hx_hparams_layer_window(hp, 0), 0);
    CHECK_EQ(hx_hparams_layer_window(hp, 1), 5);
    CHECK_EQ(hx_hparams_layer_window(hp, 2), 5);
    CHECK_NEAR(hp->attn_scale, 0.125, 1e-7);
    CHECK_NEAR(hp->attn_softcap, 50.0, 1e-6);
    CHECK_EQ(hp->final_softcap, 0);
    hx_model_files_close(mf);
    return 0;
}

/* Phi-3 LongRoPE: partial rotary sets the rotated dims, the factor lists become the tensors a
 * GGUF has (rope_factors_long/short.weight), the original context comes from the top level and
 * the factor from max_position_embeddings / original. A list of the wrong length is refused. */
static int test_phi3_longrope_factors_become_tensors(void)
{
    hx_model_files *mf = NULL;
    hx_err err = {0};
    const char *fmt = "{\"model_type\": \"phi3\", \"hidden_size\": 32, \"intermediate_size\": 64, "
                      "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 16, "
                      "\"max_position_embeddings\": 128, \"original_max_position_embeddings\": 32,"
                      " \"partial_rotary_factor\": 0.5, \"rope_scaling\": {\"type\": \"longrope\", "
                      "\"long_factor\": [2.0, 3.0, 5.0, 7.0%s], \"short_factor\": [1.0, 1.5, 1.25, 1.0]}}";
    char cfg[1024];
    snprintf(cfg, sizeof cfg, fmt, "");
    CHECK_EQ(open_with(cfg, "model.embed_tokens.weight", &mf, &err), HX_OK);
    const hx_hparams *hp = &mf->hp;
    CHECK_EQ(hp->d_head, 16);
    CHECK_EQ(hp->n_rot, 8);
    CHECK_EQ(hp->rope_scaling, HX_ROPE_SCALING_LONGROPE);
    CHECK_EQ(hp->rope_orig_ctx, 32);
    CHECK_NEAR(hp->rope_factor, 4.0, 1e-6);
    const hx_tensor_info *lf = hx_model_files_find(mf, "rope_factors_long.weight");
    const hx_tensor_info *sf = hx_model_files_find(mf, "rope_factors_short.weight");
    CHECK(lf && sf);
    CHECK_EQ(lf->t.shape[0], 4);
    float v[4];
    hx_tensor_dequant_row(&lf->t, 0, v);
    CHECK_NEAR(v[2], 5.0, 0);
    hx_tensor_dequant_row(&sf->t, 0, v);
    CHECK_NEAR(v[1], 1.5, 0);
    hx_model_files_close(mf);
    snprintf(cfg, sizeof cfg, fmt, ", 9.0");
    CHECK_EQ(open_with(cfg, "model.embed_tokens.weight", &mf, &err), HX_E_FORMAT);
    CHECK_CONTAINS(err.msg, "rope_scaling.long_factor must be a list of 4 numbers");
    return 0;
}

static const check_case cases[] = {
    { "hf_folder_opens_with_normalised_names", test_hf_folder_opens_with_normalised_names },
    { "mlx_weights_join_their_scales_and_biases", test_mlx_weights_join_their_scales_and_biases },
    { "missing_config_field_is_named", test_missing_config_field_is_named },
    { "unknown_architecture_is_refused_with_the_list", test_unknown_architecture_is_refused_with_the_list },
    { "embedding_disagreeing_with_config_is_an_error", test_embedding_disagreeing_with_config_is_an_error },
    { "mlx_weight_without_biases_is_an_error", test_mlx_weight_without_biases_is_an_error },
    { "unsupported_dtype_names_tensor", test_unsupported_dtype_names_tensor },
    { "truncated_safetensors_is_an_error_naming_the_file", test_truncated_safetensors_is_an_error_naming_the_file },
    { "folder_without_config_is_not_a_model", test_folder_without_config_is_not_a_model },
    { "allocation_failures_are_clean", test_allocation_failures_are_clean },
    { "starter_model_description", test_starter_model_description },
    { "gemma3_text_config_takes_the_family_defaults", test_gemma3_text_config_takes_the_family_defaults },
    { "gemma2_layer_types_and_caps", test_gemma2_layer_types_and_caps },
    { "phi3_longrope_factors_become_tensors", test_phi3_longrope_factors_become_tensors },
};
CHECK_MAIN(cases)
