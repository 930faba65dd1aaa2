"""Falcon-H1 config.json files (TII; modeling_falcon_h1.py, configuration_falcon_h1.py): every layer attention and
a Mamba2 mixer side by side on one RMSNorm's output, their outputs summed into the residual, then a SwiGLU MLP
behind its own RMSNorm (FalconH1DecoderLayer; tfcalc.architecture.parallel_hybrid, ``ssm_parallel``).

- attention: num_attention_heads, num_key_value_heads, head_dim (default hidden_size / heads), attention_bias,
  RoPE of the whole head (rope_parameters' rope_theta; only the default rope_type);
- Mamba2 (FalconH1Mixer): mamba_d_ssm (the inner width; null: mamba_expand·hidden_size), mamba_n_heads,
  mamba_d_head ("auto": d_ssm / heads), mamba_n_groups, mamba_d_state, mamba_d_conv, mamba_chunk_size,
  mamba_conv_bias, mamba_proj_bias (in_proj), projectors_bias (out_proj); the gated norm only with mamba_rms_norm
  (norm(y)·silu(z) with mamba_norm_before_gate, else norm(y·silu(z))), without it y·silu(z); the SSM state fp32;
- muP multipliers, read into the model and run as transformers runs them (none changes a parameter or a matmul):
  embedding_multiplier, lm_head_multiplier (logits times it), key_multiplier (keys times it: the score scale
  key_multiplier / sqrt(head_dim)), attention_in/out_multiplier, ssm_in/out_multiplier, ssm_multipliers (in_proj's
  z, x, B, C, dt) and mlp_multipliers (gate, down).

Refused in one line: a time_step_limit other than (0, inf) (transformers' decode step ignores it), an activation
other than SiLU, another rope_type or a partial rotary factor.
"""

from __future__ import annotations

import math

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.mamba2 import MIXER, ssm_fields
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader


def _multiplier(r: Reader, key: str) -> float | None:
    """A finite number (default 1.0); None where it is 1 (no multiply)."""
    value = r.number(key, 1.0)
    if not math.isfinite(value):
        raise r.fail(f"'{key}' must be a finite number; got {shown(value)}")
    return None if value == 1.0 else float(value)


def _multipliers(r: Reader, key: str, n: int) -> tuple[float, ...] | None:
    """A list of n finite numbers (default all 1.0); None where every one is 1."""
    value = r.get(key, [1.0] * n)
    if not isinstance(value, list) or len(value) != n or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        raise r.fail(f"'{key}' must list {n} finite numbers; got {shown(value)}")
    return None if all(v == 1.0 for v in value) else tuple(float(v) for v in value)


def _mamba(r: Reader) -> None:
    d = r.fields["d_model"]
    expand = r.number("mamba_expand", 2, integer=True)
    inner = r.raw.get("mamba_d_ssm", 1024)  # present and null: mamba_expand·hidden_size (FalconH1Mixer)
    inner = expand * d if inner is None else inner
    if isinstance(inner, bool) or not isinstance(inner, int) or inner < 1:
        raise r.fail(f"'mamba_d_ssm' must be a positive integer; got {shown(inner)}")
    heads = r.size("mamba_n_heads", 128)
    if r.get("mamba_d_head", "auto") == "auto":
        if inner % heads:
            raise r.fail(f"'mamba_n_heads' ({heads}) must divide the Mamba2 inner width ({inner}), as FalconH1Config "
                         "requires")
        r.raw = dict(r.raw, mamba_d_head=inner // heads)
    ssm_fields(r, "mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv",
               "mamba_chunk_size", "mamba_proj_bias", {"mamba_n_heads": 128, "mamba_d_head": 0, "mamba_d_state": 256,
                                                       "mamba_n_groups": 1, "mamba_d_conv": 4,
                                                       "mamba_chunk_size": 256, "mamba_proj_bias": False})
    if r.fields["ssm_heads"] * r.fields["ssm_head_dim"] != inner:
        raise r.fail(f"mamba_d_head·mamba_n_heads must equal the Mamba2 inner width ({inner}), as FalconH1Config "
                     "requires")
    r.fields["ssm_conv_bias"] = r.flag("mamba_conv_bias", True)
    r.fields["ssm_out_bias"] = r.flag("projectors_bias", False)
    normed, first = r.flag("mamba_rms_norm", False), r.flag("mamba_norm_before_gate", True)
    r.fields["ssm_gate_norm"] = ("norm_then_gate" if first else "gated") if normed else "none"
    r.fields["ssm_proj_multipliers"] = _multipliers(r, "ssm_multipliers", 5)


def _attention(r: Reader) -> None:
    heads = r.take("num_attention_heads", "n_head", 32)
    # FalconH1Config: 8 by default, the query heads where the file gives null
    r.take("num_key_value_heads", "n_kv_head", heads if "num_key_value_heads" in r.raw else 8)
    d_head = r.take("head_dim", "d_head", r.fields["d_model"] // heads if isinstance(heads, int) and heads else None)
    r.take("attention_bias", "attn_bias", False)
    rope = r.rope_parameters() or (r.get("rope_scaling") if isinstance(r.get("rope_scaling"), dict) else {})
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise r.fail(f"rope_type {shown(rope.get('rope_type', rope.get('type')))} is not built for falcon_h1 (only "
                     "the default RoPE)")
    r.rope(10000.0)
    if r.fields["rope_fraction"] not in (None, 1, 1.0):
        raise r.fail(f"'partial_rotary_factor' {shown(r.fields['rope_fraction'])}: FalconH1RotaryEmbedding rotates "
                     "the whole head")
    key = _multiplier(r, "key_multiplier")
    if key is not None and isinstance(d_head, int) and d_head > 0:  # keys times m before RoPE: scores times m
        r.fields["attn_scale"] = key / math.sqrt(d_head)


def falcon_h1(r: Reader) -> None:
    r.required(("hidden_size", "d_model"), ("vocab_size", "vocab_size"))
    r.take("num_hidden_layers", "n_layer", 32)
    _mamba(r)
    _attention(r)
    r.take("intermediate_size", "d_ff", 14336)
    r.take("mlp_bias", "ffn_bias", False)
    r.take("max_position_embeddings", "max_seq_len", 8192)
    r.take("rms_norm_eps", "norm_eps", 1e-5)
    r.take("tie_word_embeddings", "tie_embeddings", False)
    r.activation("hidden_act", "silu")
    r.dtype()
    embedding, head = _multiplier(r, "embedding_multiplier"), _multiplier(r, "lm_head_multiplier")
    r.fields.update(ssm_parallel=True, embedding_multiplier=embedding, norm="rmsnorm", norm_bias=False,
                    norm_placement="pre", final_norm=True, gated_ffn=True,
                    attn_in_multiplier=_multiplier(r, "attention_in_multiplier"),
                    attn_out_multiplier=_multiplier(r, "attention_out_multiplier"),
                    ssm_in_multiplier=_multiplier(r, "ssm_in_multiplier"),
                    ssm_out_multiplier=_multiplier(r, "ssm_out_multiplier"),
                    ffn_multipliers=_multipliers(r, "mlp_multipliers", 2))
    r.causal_or_base("FalconH1")
    if r.fields.get("lm_head", True):
        r.fields["logit_scale"] = head


# ---- its checkpoint names (tfcalc.hf_config.names): modeling_falcon_h1.py, after ``model.`` ----

def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's attention under ``self_attn`` (tfcalc's ``attn``), the Mamba2 mixer under ``mamba`` (tfcalc's
    ``attn.ssm``; its gated norm ``mamba.norm`` -> ``attn.ssm.gate_norm``), the MLP under ``feed_forward``, the norms
    ``input_layernorm`` (the mixers'), ``pre_ff_layernorm`` (the MLP's) and ``final_layernorm``."""
    layer = r"layers\.(\d+)\."
    return [
        (r"embed_tokens\.weight", "tok_emb.weight"), (r"lm_head\.weight", tied_head(arch)),
        (r"final_layernorm\.weight", "final_norm.weight"),
        (layer + r"input_layernorm\.weight", "blocks.{0}.attn_norm.weight"),
        (layer + r"pre_ff_layernorm\.weight", "blocks.{0}.ffn_norm.weight"),
        (layer + r"self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"self_attn\.o_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (r"layers\.(\d+)" + MIXER.replace(r"\.mixer\.", r"\.mamba\."), "blocks.{0}.attn.ssm.{1}"),
        (layer + r"mamba\.norm\.weight", "blocks.{0}.attn.ssm.gate_norm.weight"),
        (layer + r"feed_forward\.(gate|up)_proj\.(weight|bias)", "blocks.{0}.ffn.up.{2}|{1}"),
        (layer + r"feed_forward\.down_proj\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]
