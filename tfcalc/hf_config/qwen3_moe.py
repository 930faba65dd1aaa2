"""Qwen3-MoE config.json files (Qwen3 technical report, arXiv 2505.09388; modeling_qwen3_moe.py), with the defaults
of configuration_qwen3_moe.py: Qwen3's attention (Q/K RMSNorm over each head, no biases unless attention_bias),
experts of moe_intermediate_size with norm_topk_prob (renormalize the top-k weights; false by default), no shared
expert; layer i has the experts when i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0, else a dense
MLP of intermediate_size (where no layer has the experts, a dense model: tfcalc.hf_config.qwen2_moe);
use_sliding_window windows every layer.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.qwen2_moe import expert_layers
from tfcalc.hf_config.reader import Reader


def qwen3_moe(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0, n_kv_head=4),
                d_ff_key=None)
    experts = r.get("num_experts", 128, aliases=("num_local_experts",))  # transformers 5 writes the latter
    if expert_layers(r, experts, dense_width=6144):  # some layer has the experts (else: a dense model)
        r.required(("moe_intermediate_size", "d_ff"))
        r.take("num_experts", "n_expert", 128, aliases=("num_local_experts",))
        r.take("num_experts_per_tok", "n_expert_active", 8)
        r.fields["router_norm_topk"] = r.flag("norm_topk_prob", False)
    r.take("attention_bias", "attn_bias", False)
    r.fields.update(qk_norm=True)
    r.windows(used=r.flag("use_sliding_window", False))  # every layer (Qwen3MoeAttention.sliding_window)
    r.causal_or_base("Qwen3Moe")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names and its experts' (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
