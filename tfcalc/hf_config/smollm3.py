"""SmolLM3 config.json files (modeling_smollm3.py), Llama-shaped (tfcalc.hf_config.llama_like): Llama's blocks;
layers without RoPE (``no_rope_layers``, 1 = RoPE, or every ``no_rope_layer_interval``-th layer without: 4), tied
embeddings by default; windows only with ``use_sliding_window`` (``layer_types``).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config import layers
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def smollm3(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=2_000_000.0, tie=True,
                        n_kv_head=4))
    r.take("attention_bias", "attn_bias", False)
    r.take("mlp_bias", "ffn_bias", False)
    n = r.fields["n_layer"]
    r.per_layer_list("no_rope_layers and layer_types")
    rope = layers.rope_flags(r, n)
    sliding = r.flag("use_sliding_window", False) and r.raw.get("sliding_window") is not None
    # configuration_smollm3.py: windowed where use_sliding_window and the layer has no RoPE
    default = ["sliding_attention" if sliding and not has_rope else "full_attention" for has_rope in rope]
    if not r.flag("use_sliding_window", False):
        r.raw = {**r.raw, "layer_types": None}  # modeling_smollm3.py reads the window only with the flag
    layers.layer_types(r, n, default, rope)
    r.causal_or_base("SmolLM3")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
