"""OLMo 3 config.json files (modeling_olmo3.py, configuration_olmo3.py): OLMo 2's blocks (tfcalc.hf_config.olmo2:
each sub-layer's output normed before the residual add, RMSNorms over the whole Q and K projections) with
sliding-window layers: ``layer_types`` (Olmo3Config's default: three sliding layers, then one full, from layer 0),
``sliding_window`` 4096. transformers 5 nests RoPE per layer type (``rope_parameters``: full_attention and
sliding_attention, each with its rope_theta, 500,000 by default); a YaRN scaling on the full layers (the released
Olmo 3 checkpoints: factor 8 from 8,192 positions) changes no count, and tfcalc's model refuses to run it
(tfcalc.model.load).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config import layers
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

THETA = 500_000.0  # Olmo3Config.default_theta


def olmo3(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=THETA))
    r.take("attention_bias", "attn_bias", False)
    r.fields.update(norm_placement="output", qk_norm=True, qk_norm_over="projection")
    _thetas(r)
    n = r.fields["n_layer"]
    r.raw = {**r.raw, "sliding_window": r.get("sliding_window", 4096)}
    layers.layer_types(r, n, ["sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(n)])
    r.causal_or_base("Olmo3")


def _thetas(r: Reader) -> None:
    """RoPE bases of the full and the sliding layers: rope_theta at the top level (transformers 4) or nested per
    layer type (5); the sliding layers' base is rope_local_theta where it differs."""
    nested = r.rope_parameters()
    full, local = nested.get("full_attention", {}), nested.get("sliding_attention", {})
    for key, value in (("full_attention", full), ("sliding_attention", local)):
        if not isinstance(value, dict):
            raise r.fail(f"'rope_parameters' {key} must be an object; got {shown(value)}")
    top = r.raw.get("rope_theta")
    theta, local_theta = full.get("rope_theta", top or THETA), local.get("rope_theta", top or THETA)
    for value in (theta, local_theta):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise r.fail(f"'rope_theta' must be a positive number; got {shown(value)}")
    r.fields["rope_theta"] = float(theta)
    if local_theta != theta:
        r.fields["rope_local_theta"] = float(local_theta)


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
