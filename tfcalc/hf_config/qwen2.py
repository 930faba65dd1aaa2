"""Qwen2 config.json files (modeling_qwen2.py): the Llama-shaped keys (tfcalc.hf_config.llama_like), Q/K/V biases and
no O bias (Qwen2Attention: o_proj bias=False), and Qwen's sliding windows (use_sliding_window, max_window_layers;
``qwen_windows``, which Qwen3 and Qwen2-MoE read too).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def qwen_windows(r: Reader) -> None:
    """Qwen2/3: the window applies only with use_sliding_window, and then (without layer_types) only
    from layer max_window_layers on (full attention below it: a layer_pattern)."""
    used = r.flag("use_sliding_window", False)
    below = r.number("max_window_layers", 28, integer=True)
    if used and r.raw.get("layer_types") is None and below:  # configuration_qwen2.py's layer_types, unbuilt
        r.full_below(below)
    else:
        r.windows(used=used)


def qwen2(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0))
    r.fields.update(attn_bias=True, attn_out_bias=False)  # modeling_qwen2.py: q/k/v_proj bias, o_proj none
    qwen_windows(r)
    r.causal_or_base("Qwen2")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
