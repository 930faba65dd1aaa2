"""Phi-3 config.json files (modeling_phi3.py): the Llama-shaped keys (tfcalc.hf_config.llama_like), fused qkv_proj
and gate_up_proj (the same tensors split by rows), partial_rotary_factor, sliding_window.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def phi3(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0))
    r.windows()
    r.causal_or_base("Phi3")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
