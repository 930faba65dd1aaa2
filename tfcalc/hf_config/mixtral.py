"""Mixtral config.json files (modeling_mixtral.py): the Llama-shaped keys (tfcalc.hf_config.llama_like),
sliding_window on every layer, and a mixture of num_local_experts experts, top num_experts_per_tok.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def mixtral(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=4096 * 32, rms_norm_eps=1e-5, rope_theta=1e6, n_kv_head=8))
    r.required(("num_local_experts", "n_expert"), ("num_experts_per_tok", "n_expert_active"))
    r.windows()
    r.causal_or_base("Mixtral")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names and its experts' (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
