"""The flat fields of ModelConfig grouped by the component of the description each one builds
(tfcalc.architecture; the front end tfcalc.architecture.flat reads them): the one table of which field says
what, in the order a model is read -- its identity and stacks, embeddings, attention (and the per-layer
kinds of it, and latent attention), the FFN, the mixture of experts (and which layers have it), norms and
the block's layout, the head, and DeepSeek-V3's MTP modules.

Every field is in exactly one group (tests/test_config.py checks the table against the dataclass); the fields
of a mixer kind registered later (a plugin's, tfcalc.architecture.kinds) are listed under its own group.
`tfcalc show` prints a config group by group. Pure Python: imports nothing of tfcalc but the registry of kinds.
"""

from __future__ import annotations

from tfcalc.architecture import kinds as mixer_kinds

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("identity (shown, never counted)", ("name", "nominal_params", "source", "dtype", "vision_params")),
    ("stacks: kind and depth (tfcalc.architecture.Stack)", ("arch", "n_layer", "n_encoder_layer", "d_model")),
    ("embeddings and positions (Embeddings)", (
        "vocab_size", "max_seq_len", "pos_encoding", "position_offset", "type_vocab_size", "embedding_norm",
        "embedding_scale", "embedding_multiplier", "embedding_dim", "tie_encoder_embedding", "rel_pos_buckets",
        "rel_pos_max_distance", "per_layer_dim", "per_layer_vocab")),
    ("attention (Attention)", (
        "n_head", "n_kv_head", "d_head", "attn_bias", "attn_out_bias", "qk_norm", "qk_norm_over", "qk_norm_per_head",
        "qk_l2_norm", "rope_theta", "rope_fraction", "attn_scale", "attn_softcap", "attn_sinks", "cross_attention",
        "local_n_kv_head", "attn_sinks_local", "attn_v_head_dim", "global_d_head", "global_n_kv_head",
        "global_v_from_k", "v_norm")),
    ("attention per layer: windows, chunks, NoPE (tfcalc.architecture.patterns)", (
        "sliding_window", "attention_chunk_size", "full_attention_every", "rope_local_theta", "nope_every",
        "layer_pattern", "attn_temperature_floor", "attn_temperature_scale", "kv_shared_layers", "kv_shared_d_ff")),
    ("short gated convolution in the layer_pattern's conv layers (ShortConv)", ("conv_kernel", "conv_bias")),
    ("lightning attention in the layer_pattern's lightning layers (Lightning)", ("lightning_block_size",)),
    ("DeepSeek-V4: compressed attention in swa, csa, hca layers, hyper-connections, hash-routed experts "
     "(CompressedAttention, Block.hyper, MoE.hash_vocab)", (
        "csa_ratio", "hca_ratio", "attn_q_lora_rank", "o_groups", "o_lora_rank", "csa_index_topk", "csa_index_heads",
        "csa_index_head_dim", "compress_rope_theta", "hyper_connections", "hc_sinkhorn_iters", "hc_eps",
        "hash_moe_layers")),
    ("linear-attention layers and gated attention (GatedDeltaNet, Attention)", (
        "linear_mixer", "linear_key_heads", "linear_value_heads", "linear_key_head_dim", "linear_value_head_dim",
        "linear_conv_kernel", "linear_split_projections", "linear_separate_projections", "linear_beta_scale",
        "linear_norm_eps", "linear_norm_placement", "attn_output_gate")),
    ("Kimi Delta Attention in the layer_pattern's kda layers (KimiDeltaAttention)", (
        "kda_heads", "kda_head_dim", "kda_conv_kernel", "kda_form", "kda_decay_limit")),
    ("RoPE scaling (tfcalc.architecture.rope: Yarn, LinearScaling, Llama3Scaling, LongRope)", (
        "rope_scaling", "rope_scaling_factor", "rope_original_max_seq_len", "rope_scaling_layers",
        "rope_low_freq_factor", "rope_high_freq_factor", "rope_short_factor", "rope_long_factor",
        "rope_proportion", "yarn_beta_fast", "yarn_beta_slow", "yarn_mscale", "yarn_mscale_all_dim",
        "yarn_attention_factor", "yarn_truncate")),
    ("latent attention (LatentAttention)", (
        "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rope_interleave",
        "index_topk", "index_n_heads", "index_head_dim", "index_rope_interleave", "index_topk_pattern",
        "attn_head_gate", "mla_lora_scale")),
    ("feed-forward (FFN)", (
        "d_ff", "ffn_mult", "ffn_dim_multiplier", "ffn_multiple_of", "activation", "gated_ffn", "ffn_bias",
        "swiglu_limit", "swiglu_alpha", "activation_sparsity")),
    ("mixture of experts and its router (MoE, Routing)", (
        "n_expert", "n_expert_active", "router_norm_topk", "router_sigmoid_input", "router_bias", "router_scoring",
        "router_groups", "router_topk_groups", "routed_scaling", "router_score_bias", "shared_expert_d_ff",
        "shared_expert_gate", "expert_capacity_factor", "expert_format", "moe_beside_mlp", "zero_experts",
        "moe_latent_dim")),
    ("which layers have the experts (Stack runs)", ("first_dense_layers", "moe_every", "dense_layers", "dense_d_ff",
                                                   "moe_shortcut")),
    ("norms and the block's layout (Norm, Block)", (
        "norm", "norm_bias", "norm_eps", "norm_placement", "parallel_block", "final_norm", "residual_multiplier",
        "residual_alpha", "layer_scalar", "altup_inputs", "altup_correct_scale", "laurel_rank")),
    ("head (Head)", ("lm_head", "tie_embeddings", "lm_head_bias", "lm_head_transform", "pooler", "logit_softcap",
                     "logit_scale")),
    ("state-space layers and the per-layer pattern (Mamba2)", (
        "hybrid_pattern", "hybrid_with_ffn", "ssm_heads", "ssm_head_dim", "ssm_groups", "ssm_state_size",
        "ssm_conv_kernel", "ssm_chunk_size", "ssm_conv_bias", "ssm_bias", "ssm_state_dtype", "ssm_out_bias",
        "ssm_gate_norm", "ssm_proj_multipliers", "ssm_dt_min", "hybrid_m_mixer")),
    ("state-space layers (Mamba-1)", (
        "ssm_inner", "ssm_dt_rank", "ssm_bcdt_norm", "ssm_bcdt_norm_eps")),
    ("Zamba2's shared transformer blocks (Zamba2Hybrid)", (
        "shared_blocks", "shared_adapter_rank", "shared_attn_adapters", "shared_untied")),
    ("attention and Mamba2 side by side (Falcon-H1)", (
        "ssm_parallel", "attn_in_multiplier", "attn_out_multiplier", "ssm_in_multiplier", "ssm_out_multiplier",
        "ffn_multipliers")),
    ("multi-token prediction (MTP)", ("mtp_layers",)),
    ("weights as the checkpoint stores them (quantization_config)", (
        "stored_quant", "stored_quant_scales", "stored_quant_group", "stored_quant_block", "stored_quant_scale_dtype",
        "stored_quant_zero_point", "stored_quant_keep")),
)


def grouped(data: dict) -> list[tuple[str, dict]]:
    """(group, {field: value}) of a config's fields, group by group (fields in none of them last, as "other")."""
    listed = {f for _, fields in GROUPS for f in fields}
    later = [(k.group or k.name, tuple(f for f in k.field_names() if f not in listed)) for k in mixer_kinds.kinds()]
    groups = GROUPS + tuple((name, fields) for name, fields in later if fields)
    out = [(name, {f: data[f] for f in fields if f in data}) for name, fields in groups]
    listed |= {f for _, fields in groups for f in fields}
    rest = {f: v for f, v in data.items() if f not in listed}
    return [(name, part) for name, part in out + [("other", rest)] if part]
