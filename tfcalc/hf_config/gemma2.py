"""Gemma 2 config.json files (modeling_gemma2.py): Gemma's keys (tfcalc.hf_config.gemma), plus sandwich norms,
query_pre_attn_scalar (scores scaled by its inverse square root), attn_logit_softcapping, final_logit_softcapping,
and windowed layers alternating with full ones.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.gemma import gemma_common
from tfcalc.hf_config.llama_like import llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def gemma2(r: Reader) -> None:
    r.divisible_heads()
    gemma_common(r, 4)
    r.activation("hidden_activation", "gelu_pytorch_tanh")  # modeling_gemma2.py reads this key, not hidden_act
    scalar = r.positive("query_pre_attn_scalar", 256)
    r.fields.update(norm_placement="sandwich", attn_scale=scalar ** -0.5,
                    attn_softcap=r.number("attn_logit_softcapping", 50.0),
                    logit_softcap=r.number("final_logit_softcapping", 30.0))
    r.raw.setdefault("sliding_window", 4096)
    if r.raw.get("layer_types") is None:  # Gemma2Config's default: layers 0, 2, 4, ... windowed
        r.every_kth_full(2)
    else:
        r.windows()
    r.causal_or_base("Gemma2")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names; every RMSNorm scales by (1 + w) (modeling_gemma.py, GemmaRMSNorm)."""
    return llama_names(arch, unit_offset=True)
