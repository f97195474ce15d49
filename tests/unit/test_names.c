/* test_names.c - architecture table and Hugging Face → GGUF tensor names. */
#include "check.h"
#include "format/names.h"

static int map(const char *arch, const char *hf, char *out)
{
    return hx_tensor_name_from_hf(arch, hf, out, 128) ? 0 : 1;
}

static int test_llama_names_follow_the_gguf_scheme(void)
{
    static const char *pairs[][2] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
        {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
        {"model.layers.12.self_attn.q_proj.weight", "blk.12.attn_q.weight"},
        {"model.layers.3.self_attn.k_proj.bias", "blk.3.attn_k.bias"},
        {"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight"},
        {"model.layers.7.post_attention_layernorm.weight", "blk.7.ffn_norm.weight"},
        {"model.layers.7.mlp.down_proj.weight", "blk.7.ffn_down.weight"},
        {"model.layers.7.mlp.gate_proj.scales", "blk.7.ffn_gate.scales"},
        {"model.layers.1.self_attn.q_norm.weight", "blk.1.attn_q_norm.weight"},
    };
    char out[128];
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        CHECK_EQ(map("llama", pairs[i][0], out), 0);
        CHECK_STR(out, pairs[i][1]);
    }
    return 0;
}

static int test_gemma_post_attention_norm_is_not_the_ffn_norm(void)
{
    char out[128];
    CHECK_EQ(map("gemma2", "model.layers.2.post_attention_layernorm.weight", out), 0);
    CHECK_STR(out, "blk.2.post_attention_norm.weight");
    CHECK_EQ(map("gemma2", "model.layers.2.pre_feedforward_layernorm.weight", out), 0);
    CHECK_STR(out, "blk.2.ffn_norm.weight");
    CHECK_EQ(map("gemma2", "model.layers.2.post_feedforward_layernorm.weight", out), 0);
    CHECK_STR(out, "blk.2.post_ffw_norm.weight");
    return 0;
}

/* Gemma 3 multimodal checkpoints: transformers >= 4.52 saves the language model under
 * model.language_model, older ones under language_model.model; both map to the one scheme. */
static int test_gemma3_multimodal_prefixes_map(void)
{
    char out[128];
    CHECK_EQ(map("gemma3", "model.language_model.layers.4.self_attn.q_norm.weight", out), 0);
    CHECK_STR(out, "blk.4.attn_q_norm.weight");
    CHECK_EQ(map("gemma3", "model.language_model.embed_tokens.weight", out), 0);
    CHECK_STR(out, "token_embd.weight");
    CHECK_EQ(map("gemma3", "language_model.model.layers.0.post_attention_layernorm.weight", out), 0);
    CHECK_STR(out, "blk.0.post_attention_norm.weight");
    CHECK_EQ(map("phi3", "model.layers.1.post_attention_layernorm.weight", out), 0);
    CHECK_STR(out, "blk.1.ffn_norm.weight");
    CHECK_EQ(map("phi3", "model.layers.1.self_attn.qkv_proj.weight", out), 0);
    CHECK_STR(out, "blk.1.attn_qkv.weight");
    return 0;
}

static int test_expert_tensors_keep_their_index(void)
{
    char out[128];
    CHECK_EQ(map("mixtral", "model.layers.4.block_sparse_moe.experts.7.w2.weight", out), 0);
    CHECK_STR(out, "blk.4.ffn_down.7.weight");
    CHECK_EQ(map("qwen3moe", "model.layers.0.mlp.experts.15.up_proj.weight", out), 0);
    CHECK_STR(out, "blk.0.ffn_up.15.weight");
    CHECK_EQ(map("qwen3moe", "model.layers.0.mlp.gate.weight", out), 0);
    CHECK_STR(out, "blk.0.ffn_gate_inp.weight");
    /* mlx_lm stacks a layer's experts in one tensor per projection, as GGUF does */
    CHECK_EQ(map("mixtral", "model.layers.2.block_sparse_moe.switch_mlp.down_proj.scales", out), 0);
    CHECK_STR(out, "blk.2.ffn_down_exps.scales");
    CHECK_EQ(map("qwen3moe", "model.layers.9.mlp.switch_mlp.gate_proj.weight", out), 0);
    CHECK_STR(out, "blk.9.ffn_gate_exps.weight");
    CHECK_EQ(map("qwen2moe", "model.layers.1.mlp.shared_expert_gate.weight", out), 0);
    CHECK_STR(out, "blk.1.ffn_gate_inp_shexp.weight");
    return 0;
}

static int test_unknown_names_are_kept(void)
{
    char out[128];
    CHECK_EQ(map("llama", "model.rotary_emb.inv_freq", out), 0);
    CHECK_STR(out, "model.rotary_emb.inv_freq");
    CHECK_EQ(map("llama", "model.layers.x.self_attn.q_proj.weight", out), 0);
    CHECK_STR(out, "model.layers.x.self_attn.q_proj.weight");
    char tiny[8];
    CHECK(!hx_tensor_name_from_hf("llama", "model.embed_tokens.weight", tiny, sizeof tiny));
    return 0;
}

static int test_architectures_normalise(void)
{
    CHECK_STR(hx_arch_from_hf("LLaMA"), "llama");
    CHECK_STR(hx_arch_from_hf("gemma3_text"), "gemma3");
    CHECK_STR(hx_arch_from_hf("qwen3_moe"), "qwen3moe");
    CHECK(hx_arch_from_hf("rwkv") == NULL);
    CHECK_STR(hx_arch_from_gguf("qwen2"), "qwen2");
    CHECK(hx_arch_from_gguf("bert") == NULL);
    CHECK(hx_arch_gguf_rope_pairs("llama"));
    CHECK(!hx_arch_gguf_rope_pairs("qwen2"));
    CHECK_CONTAINS(hx_arch_list(), "qwen3");
    return 0;
}

static const check_case cases[] = {
    { "llama_names_follow_the_gguf_scheme", test_llama_names_follow_the_gguf_scheme },
    { "gemma_post_attention_norm_is_not_the_ffn_norm", test_gemma_post_attention_norm_is_not_the_ffn_norm },
    { "gemma3_multimodal_prefixes_map", test_gemma3_multimodal_prefixes_map },
    { "expert_tensors_keep_their_index", test_expert_tensors_keep_their_index },
    { "unknown_names_are_kept", test_unknown_names_are_kept },
    { "architectures_normalise", test_architectures_normalise },
};
CHECK_MAIN(cases)
