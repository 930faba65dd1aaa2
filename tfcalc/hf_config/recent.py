"""Llama-shaped config.json files of 2024-25 with their own layer layouts: smollm3, olmo2, glm4 (Gemma 3 and
Llama 4: tfcalc.hf_config.gemma3, tfcalc.hf_config.llama4).

- smollm3 (modeling_smollm3.py): Llama's blocks; layers without RoPE (``no_rope_layers``, 1 = RoPE, or
  every ``no_rope_layer_interval``-th layer without: 4), tied embeddings by default; windows only with
  ``use_sliding_window`` (``layer_types``);
- olmo2 (modeling_olmo2.py): no input norms -- each sub-layer's output is normed before the residual add
  (``post_attention_layernorm``, ``post_feedforward_layernorm``) -- and RMSNorms over the whole Q and K
  projections (n_head·d_head and n_kv_head·d_head wide);
- glm4 (modeling_glm4.py): Gemma 2's four norms (input, post_self_attn, post_attention -- the FFN's input
  -- and post_mlp), partial rotary (``partial_rotary_factor`` 0.5) of interleaved channel pairs, Q/K/V
  biases (``attention_bias``, default true) and no O bias, [gate | up] fused in ``gate_up_proj``.
"""

from __future__ import annotations

from typing import Callable

from tfcalc.hf_config import layers
from tfcalc.hf_config.llama_like import _common, _finish
from tfcalc.hf_config.reader import Reader


def smollm3(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=2_000_000.0, tie=True))
    r.take("attention_bias", "attn_bias", False)
    r.take("mlp_bias", "ffn_bias", False)
    n = r.fields["n_layer"]
    rope = layers.rope_flags(r, n)
    sliding = r.flag("use_sliding_window", False) and r.raw.get("sliding_window") is not None
    # configuration_smollm3.py: windowed where use_sliding_window and the layer has no RoPE
    default = ["sliding_attention" if sliding and not has_rope else "full_attention" for has_rope in rope]
    if not r.flag("use_sliding_window", False):
        r.raw = {**r.raw, "layer_types": None}  # modeling_smollm3.py reads the window only with the flag
    layers.layer_types(r, n, default, rope)
    _finish(r, "SmolLM3")


def olmo2(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0))
    r.take("attention_bias", "attn_bias", False)
    r.fields.update(norm_placement="output", qk_norm=True, qk_norm_over="projection")
    _finish(r, "Olmo2")


def glm4(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=131072, rms_norm_eps=1.5625e-07, rope_theta=10000.0, head_dim=128))
    r.rope(10000.0, fraction=0.5)
    r.fields.update(attn_bias=r.flag("attention_bias", True), attn_out_bias=False, norm_placement="sandwich")
    _finish(r, "Glm4")


MAPPERS: dict[str, Callable[[Reader], None]] = {"smollm3": smollm3, "olmo2": olmo2, "glm4": glm4}
