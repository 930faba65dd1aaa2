"""Apertus config.json files (Swiss AI; modeling_apertus.py, configuration_apertus.py), Llama-shaped
(tfcalc.hf_config.llama_like): pre-norm blocks (``attention_layernorm``, ``feedforward_layernorm``), RMSNorms over
each Q and K head (q_norm, k_norm, before RoPE), ``attention_bias`` on Q, K, V and O alike, and a plain (not gated)
MLP, down(act(up(x))), whose activation is xIELU (``hidden_act`` "xielu": two learned scalars per layer,
tfcalc.architecture.ffn). RoPE base 12,000,000 (ApertusConfig.default_theta); ApertusConfig fills in llama3
scaling (factor 8 from 8,192 positions) when the file names none: it changes no count, and tfcalc's model refuses
to run it (tfcalc.model.load).
"""

from __future__ import annotations

import json

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def apertus(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=65536, rms_norm_eps=1e-5, rope_theta=12_000_000.0,
                        hidden_act="xielu"))
    r.take("attention_bias", "attn_bias", False)  # O's bias follows (attn_out_bias unset)
    r.fields.update(gated_ffn=False, qk_norm=True)  # per head (qk_norm_over "head")
    r.causal_or_base("Apertus")
    # keys of the released files (transformers 4.57) that ApertusConfig 5 ignores: Q/K norms always, pre-norm
    # always, no MLP bias; a file asking otherwise describes a model transformers does not build
    for key, built in (("qk_norm", True), ("post_norm", False), ("mlp_bias", False)):
        value = r.raw.get(key, built)
        if value != built or isinstance(value, (int, float)) and not isinstance(value, bool):
            raise r.fail(f"'{key}' {json.dumps(value)} is not built: transformers' Apertus has {key} "
                         f"{json.dumps(built)} always")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_apertus.py: ApertusDecoderLayer's norm names, and the xIELU's parameters (llama_names)."""
    return llama_names(arch, [
        (r"layers\.(\d+)\.attention_layernorm\.weight", "blocks.{0}.attn_norm.weight"),
        (r"layers\.(\d+)\.feedforward_layernorm\.weight", "blocks.{0}.ffn_norm.weight")])
