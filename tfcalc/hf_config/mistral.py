"""Mistral config.json files (modeling_mistral.py): the Llama-shaped keys (tfcalc.hf_config.llama_like), with
sliding_window on every layer.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def mistral(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=4096 * 32, rms_norm_eps=1e-6, rope_theta=10000.0, n_kv_head=8))
    r.windows()
    r.causal_or_base("Mistral")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
