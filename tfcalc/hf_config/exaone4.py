"""EXAONE 4.0 config.json files (modeling_exaone4.py, configuration_exaone4.py), Llama-shaped
(tfcalc.hf_config.llama_like): OLMo 2's output norms (post_attention_layernorm and post_feedforward_layernorm, no
input norms), RMSNorms over each Q and K head, and local layers (``layer_types``; by default every
``sliding_window_pattern``-th layer full, the others windowed by ``sliding_window``). Exaone4Attention rotates Q
and K only in the sliding layers when a window is set: the full layers have no RoPE (NoPE); without a window
every layer is full and rotates. RoPE scaling (EXAONE-4.0-32B: llama3, factor 16) changes no count; tfcalc's
model refuses to run it (tfcalc.model.load).

Exaone4Config cannot build its default layer list from a string pattern ("LLLG") or without a window (it fails
on ``(i + 1) % pattern``): such a file without ``layer_types`` is refused, naming the key.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config import layers
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def exaone4(r: Reader) -> None:
    # num_key_value_heads absent: Exaone4Config's 32, whatever the heads (tfcalc.hf_config's contract)
    base_fields(r, dict(max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0, n_kv_head=32))
    r.fields.update(norm_placement="output", qk_norm=True)  # per head (qk_norm_over "head")
    n = r.fields["n_layer"]
    window = r.raw.get("sliding_window", 4096)  # Exaone4Config's default
    r.raw = {**r.raw, "sliding_window": window}
    kinds = r.raw.get("layer_types")
    if kinds is None:
        pattern = r.raw.get("sliding_window_pattern", 4)
        if window is None:
            raise r.fail("'sliding_window' is null and 'layer_types' is not given: transformers builds no layer list "
                         "(pattern 0); give layer_types")
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise r.fail(f"'sliding_window_pattern' {shown(pattern)} without 'layer_types': transformers builds its "
                         "layer list from a positive integer only; give layer_types")
        kinds = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n:
        raise r.fail(f"'layer_types' must list one kind for each of the {n} layers; got {shown(kinds)}")
    rope = [window is None or kind == "sliding_attention" for kind in kinds]
    layers.layer_types(r, n, kinds, rope)
    r.causal_or_base("Exaone4")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
