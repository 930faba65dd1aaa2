"""Qwen3-Next config.json files (modeling_qwen3_next.py, configuration_qwen3_next.py; Qwen team, "Qwen3-Next",
https://qwen.ai/blog?id=4074c4f4d2b8ed1f86fefc7dd7a05c6ebd7b9cd2): Llama-shaped keys (tfcalc.hf_config.llama_like)
with the defaults of Qwen3NextConfig; ``layer_types`` of ``linear_attention`` (gated DeltaNet, tfcalc's
linear_mixer on the local layers: linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
linear_value_head_dim, linear_conv_kernel_dim) and ``full_attention`` (gated softmax attention: Q's projection
2·n_head·head_dim wide, per head [q | gate], Q/K RMSNorms over each head, rotary on partial_rotary_factor of
each head, default 0.25); without ``layer_types``, every ``full_attention_interval``-th layer (default 4) is
full, as Qwen3NextConfig.__post_init__ writes them. Experts as Qwen2-MoE's (tfcalc.hf_config.qwen2_moe:
num_experts, decoder_sparse_step, mlp_only_layers) with a gated shared expert, norm_topk_prob true by default.
Every RMSNorm but the DeltaNet's gated one scales by (1 + w) (Qwen3NextRMSNorm): a storage convention the
checkpoint loader undoes (checkpoint_names below), no count changes.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.layers import attention_layers
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.qwen2_moe import expert_layers
from tfcalc.hf_config.reader import Reader

KINDS = ("linear_attention", "full_attention")


def qwen3_next(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=256,
                        n_kv_head=2),
                d_ff_key=None)
    gated_attention(r)
    if expert_layers(r, r.get("num_experts", 512)):
        r.take("moe_intermediate_size", "d_ff", 512)
        r.take("num_experts", "n_expert", 512)
        r.take("num_experts_per_tok", "n_expert_active", 10)
        r.fields["router_norm_topk"] = r.flag("norm_topk_prob", True)
        shared = r.take("shared_expert_intermediate_size", "shared_expert_d_ff", 512)
        r.fields["shared_expert_gate"] = bool(shared)
    linear_layers(r)
    r.causal_or_base("Qwen3Next")


def gated_attention(r: Reader) -> None:
    """The full-attention layers of Qwen3-Next and Qwen3.5: gated, Q/K norms per head, a quarter rotary; the
    activation SiLU (the DeltaNet convolution's, hidden_act)."""
    if r.fields["activation"] != "silu":  # the convolution's activation and the experts' (hidden_act)
        raise r.fail(f"'hidden_act' {shown(r.raw.get('hidden_act'))}: tfcalc builds the gated DeltaNet with SiLU "
                     "only (its convolution's activation)")
    r.rope(10000.0, fraction=0.25)  # Qwen3NextConfig.__post_init__: partial_rotary_factor 0.25 unless given
    bias = r.flag("attention_bias", False)
    r.fields.update(attn_bias=bias, attn_out_bias=bias, qk_norm=True, attn_output_gate=True)


def linear_layers(r: Reader, split: bool = False) -> None:
    """The gated-DeltaNet layers and their sizes (Qwen3NextConfig's defaults, which Qwen3.5's share)."""
    if _layers(r):
        r.fields["linear_mixer"] = "gated_deltanet"
        r.take("linear_num_key_heads", "linear_key_heads", 16)
        r.take("linear_num_value_heads", "linear_value_heads", 32)
        r.take("linear_key_head_dim", "linear_key_head_dim", 128)
        r.take("linear_value_head_dim", "linear_value_head_dim", 128)
        r.take("linear_conv_kernel_dim", "linear_conv_kernel", 4)
        if split:
            r.fields["linear_split_projections"] = True


def _layers(r: Reader) -> bool:
    """Which layers are linear (layer_types, else full_attention_interval); whether any is."""
    n = r.fields["n_layer"]
    kinds = r.raw.get("layer_types")
    if kinds is None:  # no list of 2**40 layers: the interval is the period itself
        every = r.number("full_attention_interval", 4, integer=True)
        if every is None or every < 1:
            raise r.fail(f"'full_attention_interval' must be a positive integer; got {shown(every)}")
        if every == 1:
            return False  # every layer full
        if every <= n:
            r.fields["full_attention_every"] = every
        return True
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k in KINDS for k in kinds):
        raise r.fail(f"'layer_types' must be a list of {', '.join(KINDS)}; got {shown(kinds)}")
    if len(kinds) != n:
        raise r.fail(f"'layer_types' lists {len(kinds)} layers; 'num_hidden_layers' is {n}")
    linear = [k == "linear_attention" for k in kinds]
    attention_layers(r, n, linear, [True] * n)
    return any(linear)


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Qwen3-Next's (and Qwen3.5's) names: RMSNorms of (1 + w) (Qwen3NextRMSNorm), Q/K norms included; the
    gated DeltaNet's tensors under transformers' names, which its component's Weights keep
    (tfcalc.architecture.gated_deltanet); the MTP modules counted beside the model."""
    return llama_names(arch, [
        (r"layers\.(\d+)\.self_attn\.([qk])_norm\.weight", "blocks.{0}.attn.{1}_norm.weight||norm+1"),
        (r"layers\.(\d+)\.linear_attn\.(dt_bias|A_log)", "blocks.{0}.attn.{1}"),
        (r"layers\.(\d+)\.linear_attn\.(\w+)\.weight", "blocks.{0}.attn.{1}.weight"),
        (r"mtp\..*", "mtp")], unit_offset=True)
