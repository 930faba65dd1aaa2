"""The configs tests/test_config_fuzz.py found tfcalc counting otherwise than transformers 5.24 builds them (or
refusing what it builds), each kept as it was drawn, held by tests/config_draws.check after its fix: parameters
equal to transformers' on meta, the generation state equal to its cache."""

from __future__ import annotations

import pytest
from config_draws import check, tfcalc_config

pytestmark = pytest.mark.filterwarnings("ignore")
pytest.importorskip("transformers")

SMALL = dict(hidden_size=64, vocab_size=96, pad_token_id=0, num_hidden_layers=2)
MLA = dict(num_attention_heads=1, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
           q_lora_rank=None)
FOUND = {
    # KimiLinearForCausalLM, BailingHybridForCausalLM and NemotronHForCausalLM tie nothing (_tied_weights_keys =
    # {}): tfcalc had tied the head to the embedding where the file said tie_word_embeddings true
    "kimi_linear-tie": dict(SMALL, **MLA, model_type="kimi_linear", architectures=["KimiLinearForCausalLM"],
                            tie_word_embeddings=True, num_experts=4, num_experts_per_token=1, moe_intermediate_size=16,
                            layer_types=["linear_attention", "full_attention"], first_k_dense_replace=0,
                            linear_attn_config={"head_dim": 8, "num_heads": 1, "short_conv_kernel_size": 2}),
    "bailing_hybrid-tie": dict(SMALL, **MLA, model_type="bailing_hybrid", architectures=["BailingHybridForCausalLM"],
                               tie_word_embeddings=True, num_experts=4, num_experts_per_token=1,
                               moe_intermediate_size=16, num_expert_group=1, topk_group=1, linear_head_dim=8,
                               linear_num_heads=1, layer_group_size=2, first_k_dense_replace=0),
    "nemotron_h-tie": dict(SMALL, model_type="nemotron_h", architectures=["NemotronHForCausalLM"],
                           tie_word_embeddings=True, intermediate_size=48, num_attention_heads=1,
                           num_key_value_heads=1, head_dim=16, hybrid_override_pattern="*M", mamba_num_heads=2,
                           mamba_head_dim=8, ssm_state_size=16, n_groups=1),
    # NemotronHForCausalLM builds no MTP layers (it ignores mtp.* on load): tfcalc had refused the file
    "nemotron_h-mtp": dict(SMALL, model_type="nemotron_h", architectures=["NemotronHForCausalLM"],
                           intermediate_size=48, num_attention_heads=1, num_key_value_heads=1, head_dim=16,
                           hybrid_override_pattern="*M", mamba_num_heads=2, mamba_head_dim=8, ssm_state_size=16,
                           n_groups=1, num_nextn_predict_layers=1),
    # Lfm2MoeModel's first num_dense_layers layers dense: tfcalc had refused num_dense_layers 0 (an intermediate_size
    # no layer uses) and num_dense_layers at the depth (every layer dense, no experts built)
    "lfm2_moe-no-dense": dict(SMALL, model_type="lfm2_moe", architectures=["Lfm2MoeForCausalLM"],
                              intermediate_size=48, num_attention_heads=1, num_key_value_heads=1,
                              layer_types=["full_attention", "conv"], num_experts=4, num_experts_per_tok=2,
                              moe_intermediate_size=16, num_dense_layers=0),
    "lfm2_moe-all-dense": dict(SMALL, model_type="lfm2_moe", architectures=["Lfm2MoeForCausalLM"],
                               intermediate_size=48, num_attention_heads=1, num_key_value_heads=1,
                               layer_types=["full_attention", "conv"], num_experts=4, num_experts_per_tok=2,
                               moe_intermediate_size=16),
    # a layers_block_type in the names transformers before 5.x wrote (mamba, attention; NemotronHConfig remaps them):
    # tfcalc had refused it
    "nemotron_h-legacy-names": dict(SMALL, model_type="nemotron_h", architectures=["NemotronHForCausalLM"],
                                    intermediate_size=48, num_attention_heads=1, num_key_value_heads=1, head_dim=16,
                                    layers_block_type=["attention", "mamba"], mamba_num_heads=2, mamba_head_dim=8,
                                    ssm_state_size=16, n_groups=1),
    # NemotronHAttention's projections have no bias whatever attention_bias says: tfcalc had counted four
    "nemotron_h-attention-bias": dict(SMALL, model_type="nemotron_h", architectures=["NemotronHForCausalLM"],
                                      intermediate_size=48, num_attention_heads=1, num_key_value_heads=1, head_dim=16,
                                      hybrid_override_pattern="*M", mamba_num_heads=2, mamba_head_dim=8,
                                      ssm_state_size=16, n_groups=1, attention_bias=True),
    # DSA: an mlp_layer_types list is what DeepseekV32Config builds by (first_k_dense_replace only fills one in):
    # tfcalc had refused a list that disagreed with first_k_dense_replace's default of 3
    "deepseek_v32-mlp-layer-types": dict(SMALL, **{**MLA, "q_lora_rank": 24}, model_type="deepseek_v32", architectures=[
        "DeepseekV32ForCausalLM"], num_hidden_layers=3, intermediate_size=48, n_routed_experts=4,
        num_experts_per_tok=1, moe_intermediate_size=16, n_group=1, topk_group=1, index_n_heads=1, index_head_dim=16,
        index_topk=4, mlp_layer_types=["dense", "sparse", "sparse"]),
    "glm_moe_dsa-all-sparse": dict(SMALL, **{**MLA, "q_lora_rank": 24}, model_type="glm_moe_dsa",
                                   architectures=["GlmMoeDsaForCausalLM"],
                                   n_routed_experts=4, num_experts_per_tok=1, moe_intermediate_size=16,
                                   n_group=1, topk_group=1, index_n_heads=1, index_head_dim=16, index_topk=4,
                                   mlp_layer_types=["sparse", "sparse"]),
    # DeepseekV4ForCausalLM ties its head to the embedding where the file says so: tfcalc had refused the file
    "deepseek_v4-tied": dict(SMALL, model_type="deepseek_v4", architectures=["DeepseekV4ForCausalLM"],
                            tie_word_embeddings=True, num_attention_heads=2, head_dim=32, q_lora_rank=16, o_groups=2,
                            o_lora_rank=16, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                            index_n_heads=2, index_head_dim=16, index_topk=4, sliding_window=8, qk_rope_head_dim=8,
                            layer_types=["sliding_attention", "compressed_sparse_attention"],
                            mlp_layer_types=["hash_moe", "moe"]),
    # every layer with the experts (moe_layer_start_index 0): intermediate_size no layer's width; tfcalc had refused it
    "ernie4_5_moe-every-layer": dict(SMALL, model_type="ernie4_5_moe", architectures=["Ernie4_5_MoeForCausalLM"],
                                     intermediate_size=48, num_attention_heads=1, num_key_value_heads=1,
                                     moe_num_experts=4, moe_k=2, moe_intermediate_size=16, moe_num_shared_experts=0,
                                     moe_layer_start_index=0),
    # one layer, full attention (MiMoV2FlashConfig's layer 0): tfcalc had refused the sliding layers' RoPE base
    "mimo_v2_flash-no-sliding-layer": dict(SMALL, model_type="mimo_v2_flash", architectures=["MiMoV2FlashForCausalLM"],
                                           num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
                                           v_head_dim=8, mlp_layer_types=["sparse"], sliding_window=4,
                                           n_routed_experts=4, num_experts_per_tok=1, moe_intermediate_size=16,
                                           n_group=1, topk_group=1),
    # every layer global (Gemma4TextConfig forces the last one full): transformers gives each global_head_dim, the
    # global K/V heads and V = K (per_layer_config); tfcalc had read them only beside sliding layers
    "gemma4-all-global": dict(SMALL, model_type="gemma4_text", architectures=["Gemma4ForCausalLM"],
                              intermediate_size=48, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                              layer_types=["full_attention", "sliding_attention"], sliding_window=4,
                              global_head_dim=32, attention_k_eq_v=True, num_global_key_value_heads=1,
                              hidden_size_per_layer_input=0, vocab_size_per_layer_input=96),
    # num_key_value_heads absent: Exaone4Config's 32 K/V heads under 64 query heads; tfcalc had read 64
    "exaone4-absent-kv-heads": dict(SMALL, model_type="exaone4", architectures=["Exaone4ForCausalLM"],
                                    intermediate_size=48, num_attention_heads=64, head_dim=8, sliding_window=4,
                                    layer_types=["sliding_attention", "full_attention"]),
    # moe_latent_size beside a pattern without E layers: NemotronHForCausalLM builds no latent projection; tfcalc had
    # refused the file
    "nemotron_h-latent-without-experts": dict(SMALL, model_type="nemotron_h", architectures=["NemotronHForCausalLM"],
                                              intermediate_size=48, num_attention_heads=1, num_key_value_heads=1,
                                              head_dim=16, hybrid_override_pattern="*M", mamba_num_heads=2,
                                              mamba_head_dim=8, ssm_state_size=16, n_groups=1, moe_latent_size=32),
    # expert_layer_offset past the last layer: JambaModel builds no experts (every layer a JambaMLP); tfcalc had
    # refused the period
    "jamba-no-expert-layer": dict(SMALL, model_type="jamba", architectures=["JambaForCausalLM"], num_hidden_layers=1,
                                  intermediate_size=48, num_attention_heads=1, num_key_value_heads=1,
                                  attn_layer_period=1, attn_layer_offset=0, expert_layer_period=2,
                                  expert_layer_offset=1, num_experts=4, num_experts_per_tok=1, mamba_d_state=4,
                                  mamba_dt_rank=4, mamba_expand=1),
}
NO_META_FORWARD = {"deepseek_v4-tied"}  # DeepseekV4's hash routing reads its table back on meta


def test_nemotron_h_mtp_tensors_are_counted_beside():
    """A Nemotron-H checkpoint's MTP layers (mtp.layers.0...: the names NemotronHForCausalLM's
    _keys_to_ignore_on_load_unexpected leaves) are read as a multi-token-prediction module's, not refused."""
    import re

    from tfcalc.hf_config.nemotron_h import checkpoint_names

    rules = checkpoint_names(tfcalc_config(FOUND["nemotron_h-mtp"]).architecture, "nemotron_h")
    name = "mtp.layers.0.mixer.experts.0.up_proj.weight"
    assert next(target for rule, target in rules if re.fullmatch(rule, name)) == "mtp"


@pytest.mark.parametrize("name", list(FOUND))
def test_found_config_counts_as_transformers_builds_it(name):
    check(FOUND[name], None if name in NO_META_FORWARD else 64)


@pytest.mark.parametrize("name", [n for n in FOUND if n.endswith("-tie")])
def test_a_class_that_ties_nothing_is_read_untied(name):
    assert tfcalc_config(FOUND[name]).tie_embeddings is False


CHECKPOINTS = {
    "lfm2_moe-all-dense": ("Lfm2MoeConfig", "Lfm2MoeForCausalLM", dict(
        hidden_size=64, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, num_experts=4, num_experts_per_tok=2, layer_types=["full_attention", "conv"],
        num_dense_layers=2)),
    "lfm2_moe-no-dense": ("Lfm2MoeConfig", "Lfm2MoeForCausalLM", dict(
        hidden_size=64, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, num_experts=4, num_experts_per_tok=2, layer_types=["full_attention", "conv"],
        num_dense_layers=0)),
    "nemotron_h-tie-bias-mtp": ("NemotronHConfig", "NemotronHForCausalLM", dict(
        hidden_size=64, intermediate_size=48, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        hybrid_override_pattern="M*-", mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=1,
        chunk_size=8, tie_word_embeddings=True, attention_bias=True, num_nextn_predict_layers=1)),
    "kimi_linear-tie": ("KimiLinearConfig", "KimiLinearForCausalLM", dict(
        hidden_size=64, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, num_experts=4,
        num_experts_per_token=2, layer_types=["linear_attention", "full_attention"], tie_word_embeddings=True,
        linear_attn_config={"head_dim": 8, "num_heads": 2, "short_conv_kernel_size": 4})),
}


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_found_checkpoints_load_with_transformers_logits(tmp_path, name):
    """The fixed readings hold on weights too: a tiny checkpoint transformers writes from each (fp32, its norms
    nudged off one) loaded by load_model gives its logits within 1e-4 of the largest."""
    import torch
    import transformers
    from hf_pairs import assert_logits_close, nudge, saved_pair

    config_class, model_class, sizes = CHECKPOINTS[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(vocab_size=96, pad_token_id=0, **sizes)
    hf = getattr(transformers, model_class)(config).eval()
    nudge(hf)
    hf, ours = saved_pair(hf, tmp_path)
    assert_logits_close(hf, ours, torch.randint(0, 96, (1, 12)))
