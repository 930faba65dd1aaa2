"""Ling 3 / Ring hybrid config.json files (model_type bailing_hybrid; inclusionAI's Ling-3.0 checkpoints;
transformers 5.24's configuration_bailing_hybrid.py and modeling_bailing_hybrid.py): Kimi Delta Attention in
Ling 3's form (tfcalc.architecture.kimi_delta, ``kda_form`` bailing: full decay and output-gate projections,
A_log per head, the bounded decay kda_lower_bound·sigmoid(...) where kda_safe_gate) in the linear_attention
layers, multi-head latent attention with interleaved RoPE and a head gate (``attn_head_gate``:
BailingHybridAttention's g_proj, sigmoid per head before O) in the full_attention layers, and DeepSeek-V3's
mixture of experts (sigmoid router with the correction bias, groups, shared experts, the first layers dense).

Keys, with BailingHybridConfig's defaults and its attribute_map's other names (both read): hidden_size 2560,
num_hidden_layers 42, num_attention_heads 32 (the latent attention's heads and the KDA's), num_key_value_heads
(the heads: latent attention), vocab_size 157184, intermediate_size 6144 (the dense layers'),
moe_intermediate_size 768, num_experts / num_local_experts 512, num_experts_per_token / num_experts_per_tok 8,
num_shared_experts / n_shared_experts 1, moe_renormalize / norm_topk_prob true, num_expert_group / n_group 8,
topk_group 4, routed_scaling_factor 2.5, first_k_dense_replace 2, kv_lora_rank 512, q_lora_rank null,
qk_nope_head_dim 128, qk_rope_head_dim 64 (the rotary width: transformers sets head_dim to it), v_head_dim 128,
rope_theta 6,000,000 (YaRN in rope_parameters or rope_scaling, read as DeepSeek-V3's), rms_norm_eps 1e-6 (the
KDA's gated norm's too), model_max_length / max_position_embeddings 262144, attention_bias, tie_word_embeddings,
hidden_act (SiLU only: the KDA convolution's). The KDA: head_dim 128 channels a head (linear_head_dim where given:
transformers writes it beside head_dim, which it overwrites with qk_rope_head_dim), num_attention_heads heads
(linear_num_heads where given), short_conv_kernel_size 4 (linear_conv_kernel_dim where given); kda_safe_gate
true, kda_lower_bound -5. Which layers: ``layer_types`` (linear_attention, full_attention), else each
layer_group_size-th (6) full, layer i with (i + 1) % 6 == 0: a trailing part group is all KDA
(BailingHybridConfig.__post_init__). The experts' layers: ``mlp_layer_types`` (dense, sparse), else the first
first_k_dense_replace dense.

Not built, as transformers builds none of them: the num_nextn_predict_layers / num_mtp_layers multi-token
prediction layers a checkpoint stores after the main ones (transformers ignores them on load; their tensors are
counted beside the model, tfcalc.hf_config.names' ``mtp``). Refused by name, as the released files spell what
transformers' classes would build otherwise: num_key_value_heads other than the heads, no_kda_lora false (Kimi's
bottlenecks), gated_attention_proj_granularity_type other than head_wise, score_function other than sigmoid,
rope_interleave false, a moe_shared_expert_intermediate_size other than the shared experts' width, a
kda_lower_bound that is not negative.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config import deepseek
from tfcalc.hf_config.kimi_linear import (
    MOE_DEFAULTS,
    checkpoint_names as kimi_linear_names,
    experts,
    latent_sizes,
    one_kv_head_per_query,
    silu_block,
)
from tfcalc.hf_config.layer_pattern import compact
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

KINDS = {"linear_attention": "kda", "full_attention": "full"}
# BailingHybridConfig's defaults of the experts' keys (configuration_bailing_hybrid.py)
DEFAULTS = dict(MOE_DEFAULTS, first_k_dense_replace=2, intermediate_size=6144, moe_intermediate_size=768,
                num_experts=512, num_experts_per_token=8, num_shared_experts=1, num_expert_group=8, topk_group=4,
                routed_scaling_factor=2.5)


def bailing_hybrid(r: Reader) -> None:
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"))
    r.take("vocab_size", "vocab_size", 157184)
    one_kv_head_per_query(r)
    _refusals(r)
    r.take("model_max_length", "max_seq_len", 262144, aliases=("max_position_embeddings",))
    r.take("rms_norm_eps", "norm_eps", 1e-6)
    r.rope(6_000_000.0)
    deepseek.yarn_scaling(r)  # YaRN or none, with its mscale² softmax scale (BailingHybridAttention: yarn_apply_mscale)
    silu_block(r)
    r.fields.update(rope_interleave=True, attn_head_gate=True)
    latent_sizes(r)
    r.fields["layer_pattern"] = _pattern(r)
    if "kda" in r.fields["layer_pattern"]:  # no KDA layer (layer_group_size 1): no KDA fields either
        _kda(r)
    experts(r, DEFAULTS)
    r.causal_or_base("BailingHybrid")


def _refusals(r: Reader) -> None:
    """The released files' keys that name a layout transformers' classes do not build (module docstring)."""
    r.refuse("no_kda_lora", False, "transformers' BailingHybridDeltaAttention projects the decay and the output "
             "gate in full (no low-rank bottleneck)")
    granularity = r.get("gated_attention_proj_granularity_type", "head_wise")
    if granularity != "head_wise":
        raise r.fail(f"'gated_attention_proj_granularity_type' {shown(granularity)} is not supported: "
                     "BailingHybridAttention gates each head (head_wise)")
    score = r.get("score_function", "sigmoid")
    if score != "sigmoid":
        raise r.fail(f"'score_function' {shown(score)} is not supported: BailingHybridTopkRouter scores with a "
                     "sigmoid")
    r.refuse("rope_interleave", False, "BailingHybridAttention always rotates interleaved pairs")
    shared = r.number("moe_shared_expert_intermediate_size", None, integer=True)
    width = r.get("moe_intermediate_size", DEFAULTS["moe_intermediate_size"])
    count = r.get("num_shared_experts", r.get("n_shared_experts", DEFAULTS["num_shared_experts"]))
    if shared is not None and isinstance(width, int) and isinstance(count, int) and shared != width * count:
        raise r.fail(f"'moe_shared_expert_intermediate_size' {shown(shared)} is not supported: transformers builds "
                     f"the shared experts moe_intermediate_size × num_shared_experts = {width * count} wide")


def _kda(r: Reader) -> None:
    """The KDA's sizes (transformers' linear_* keys where a file has them, else the ones they are copied from) and
    its decay (module docstring)."""
    for key, field, base, default in (("linear_num_heads", "kda_heads", "num_attention_heads", None),
                                      ("linear_head_dim", "kda_head_dim", "head_dim", 128),
                                      ("linear_conv_kernel_dim", "kda_conv_kernel", "short_conv_kernel_size", 4)):
        name = key if r.raw.get(key) is not None else base
        value = r.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise r.fail(f"'{name}' must be a positive integer; got {shown(value)}")
        r.fields[field] = value
    r.fields["kda_form"] = "bailing"
    if r.flag("kda_safe_gate", True):
        bound = r.number("kda_lower_bound", -5.0)
        if not bound < 0:
            raise r.fail(f"'kda_lower_bound' must be negative (the least log decay a step); got {shown(bound)}")
        r.fields["kda_decay_limit"] = -float(bound)


def _pattern(r: Reader) -> str:
    n = r.fields["n_layer"]
    kinds = r.raw.get("layer_types")
    if kinds is None:
        group = r.get("layer_group_size", 6)
        if not isinstance(group, int) or isinstance(group, bool) or group < 1:
            raise r.fail(f"'layer_group_size' must be a positive integer; got {shown(group)}")
        if n > 4096:  # the same written as a pattern, no list of n (a file may say 2**40 layers)
            groups, rest = divmod(n, group)
            run = f"kda*{group - 1}, full" if group > 1 else "full"
            return ", ".join(p for p in (f"({run})*{groups}" if groups else "", f"kda*{rest}" if rest else "") if p)
        kinds = ["full_attention" if (i + 1) % group == 0 else "linear_attention" for i in range(n)]
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k in KINDS for k in kinds):
        raise r.fail(f"'layer_types' must be a list of {', '.join(KINDS)}; got {shown(kinds)}")
    if len(kinds) != n:
        raise r.fail(f"'layer_types' lists {len(kinds)} layers; 'num_hidden_layers' is {n}")
    return compact([KINDS[k] for k in kinds])


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Ling 3's names as its checkpoints store them (and save_pretrained writes them back: conversion_mapping.py,
    bailing_hybrid): word_embeddings, each layer's mixer under ``attention`` (transformers' ``self_attn``), its
    output projection ``dense`` (o_proj), the KDA's forget gate under it (f_proj, dt_bias, A_log; transformers'
    forget_gate), the convolution as three (q/k/v_conv1d), the head gate and the KDA's output gate both g_proj;
    the router's correction bias ``expert_bias`` (e_score_correction_bias); then Kimi Linear's and DeepSeek-V3's
    names (the latent attention, the experts, the MTP layers, Llama's others)."""
    attn = r"layers\.(\d+)\.(?:attention|self_attn)\."
    # first: the MTP layers (after the main ones) and FP8 scales, whatever their names
    return deepseek.moe_names(arch)[:2] + [
        (r"word_embeddings\.weight", "tok_emb.weight"),
        (attn + r"([qkv])_proj\.weight", "blocks.{0}.attn.{1}.weight"),
        (attn + r"([qkv])_conv1d\.weight", "blocks.{0}.attn.{1}_conv1d.weight"),
        (attn + r"(?:forget_gate\.)?(dt_bias|A_log)", "blocks.{0}.attn.{1}"),
        (attn + r"(?:forget_gate\.)?(f_proj|b_proj|g_proj|o_norm)\.weight", "blocks.{0}.attn.{1}.weight"),
        (attn + r"(?:dense|o_proj)\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (attn + r"q_a_proj\.(weight|bias)", "blocks.{0}.attn.q_a.{1}"),
        (attn + r"q_a_layernorm\.weight", "blocks.{0}.attn.q_a_norm.weight"),
        (attn + r"q_b_proj\.weight", "blocks.{0}.attn.q_b.weight"),
        (attn + r"kv_a_proj_with_mqa\.(weight|bias)", "blocks.{0}.attn.kv_a.{1}"),
        (attn + r"kv_a_layernorm\.weight", "blocks.{0}.attn.kv_a_norm.weight"),
        (attn + r"kv_b_proj\.weight", "blocks.{0}.attn.kv_b.weight"),
        (r"layers\.(\d+)\.mlp\.gate\.expert_bias", "buffer:blocks.{0}.ffn.score_bias"),
    ] + kimi_linear_names(arch, model_type)
