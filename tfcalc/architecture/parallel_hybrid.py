"""Attention and a Mamba2 mixer side by side in one layer's mixer slot: Falcon-H1 (TII 2025; transformers'
models/falcon_h1/modeling_falcon_h1.py, FalconH1DecoderLayer). Both read the same normed input and their outputs
are summed before the one residual add, then the layer's FFN follows as in any pre-norm block:

   h = norm(x);  x = x + ssm_out · mamba(ssm_in · h) + attn_out · attention(attn_in · h);  x = x + ffn(norm2(x))

with Falcon-H1's muP multipliers (FalconH1Config): ``attention_in_multiplier``, ``attention_out_multiplier``,
``ssm_in_multiplier``, ``ssm_out_multiplier`` held here (None: 1, no multiply); its ``ssm_multipliers`` (in_proj's
z, x, B, C, dt) belong to the Mamba2 component (``proj_scales``) and its ``key_multiplier`` to the attention's score
scale (keys times m before RoPE, which is linear, so the scores times m: ``attn_scale`` = m / sqrt(d_head)). None of
them changes a parameter or a FLOP of a matmul; each is one multiply an element, counted as non-matmul work.

``ParallelMixers`` answers the mixer protocol (tfcalc.architecture.mixer) as the union of its two parts (the union
alone: tfcalc.architecture.attention_ssm, shared with Zamba2): every tensor, projection, position-mixing matmul and
state tensor of each, the Mamba2 part's named with ``ssm_`` before them (attention's ``o`` and Mamba2's out_proj
``o`` apart: ``attn_o`` and ``attn_ssm_o`` in the FLOP table). Its state is the attention's K and V, which grow with
the context, beside the Mamba2 part's fixed conv ring and SSM state; it cannot rewind (the recurrent part holds no
earlier position) nor ring over context-parallel ranks. Tensor parallelism splits both parts by heads (attention
heads; SSM heads and groups).

The flat front end: ``ssm_parallel`` (every layer so, the attention and Mamba2 sizes from their own fields), the four
multipliers, and ``ffn_multipliers`` (Falcon-H1's mlp_multipliers: the gate projection's output times the first
before the activation, the FFN's output times the second; tfcalc.architecture.ffn). Pure Python: no torch, typer or
rich here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from tfcalc.architecture import flat_attention, kinds, mamba2
from tfcalc.architecture.attention import Attention
from tfcalc.architecture.attention_ssm import AttentionSsmParts
from tfcalc.architecture.kinds import MixerKind, register
from tfcalc.architecture.mixer import Elementwise, Mixing
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

SSM = "ssm_"  # the prefix of the Mamba2 part's names


@dataclass(frozen=True)
class ParallelMixers(AttentionSsmParts):
    attention: Attention
    ssm: mamba2.Mamba2
    attn_in: Optional[float] = None
    attn_out: Optional[float] = None
    ssm_in: Optional[float] = None
    ssm_out: Optional[float] = None
    module = "tfcalc.model.parallel_hybrid:ParallelMixersModule"

    def __post_init__(self) -> None:
        if self.attention.d_model != self.ssm.d_model:
            raise InputError("the attention and Mamba2 mixers of one layer read the same d_model")

    @property
    def d_model(self) -> int:
        return self.attention.d_model

    @property
    def causal(self) -> bool:
        return self.attention.causal

    def multipliers(self) -> int:
        """How many of the four multipliers are given (each one multiply per element of d_model per token)."""
        return sum(m is not None for m in (self.attn_in, self.attn_out, self.ssm_in, self.ssm_out))

    def weights(self) -> list[Weight]:
        return self.attention.weights() + [w.named(SSM) for w in self.ssm.weights()]

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        return self.attention.linears(with_kv, step) + [m.named(SSM) for m in self.ssm.linears(with_kv, step)]

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        ssm = [dataclasses.replace(m, name=SSM + m.name) for m in self.ssm.mixing(queries, keys, step)]
        return self.attention.mixing(queries, keys, step) + ssm

    def elementwise(self, queries: int, keys: int, step: bool = False) -> list[Elementwise]:
        """Both parts', the sum of their outputs (one add per element), and the multipliers given."""
        d = self.d_model
        out = super().elementwise(queries, keys)
        out.append(Elementwise("ssm", "attention + Mamba2 outputs", queries * d, per_element=1))
        if self.multipliers():
            out.append(Elementwise("ssm", "muP in/out multipliers", queries * d * self.multipliers(), per_element=1))
        return out

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool,
              sources: Optional[int] = None) -> dict[str, int]:
        """Both parts' terms, summed where they share a name. A scaled input (attn_in, ssm_in) is a tensor of its
        own that its projection keeps, and a product by a constant keeps nothing: with one given, its copy beside
        the block's norm output (which the other part keeps); with both, two copies where the norm output, kept by
        neither, is counted by the block -- e·d per token either way beyond the block's (``mixer_inputs``, kept
        whole under TP). Checked against autograd in fp32 (tests/model/test_falcon_h1.py)."""
        out = super().saved(batch, seq, e, kernel, dropout)
        if self.attn_in is not None or self.ssm_in is not None:
            out["mixer_inputs"] = e * self.d_model
        return out

    def working_set(self, kernel: str, length: int, sources: Optional[int] = None) -> int:
        """Both parts' at once (the attention's output is alive while the Mamba2 part runs), and the sum."""
        return super().working_set(kernel, length) + self.d_model


# ---- its flat fields (tfcalc.architecture.kinds): every layer claimed where ssm_parallel is true ----

@dataclass(frozen=True, kw_only=True)
class ParallelFields:
    # every layer attention and a Mamba2 mixer side by side, outputs summed, then the FFN (Falcon-H1,
    # modeling_falcon_h1.py FalconH1DecoderLayer); the Mamba2 sizes from the ssm_* fields
    ssm_parallel: bool = False
    # Falcon-H1's muP multipliers (FalconH1Config): each mixer's input and output times these; None: 1
    attn_in_multiplier: Optional[float] = None
    attn_out_multiplier: Optional[float] = None
    ssm_in_multiplier: Optional[float] = None
    ssm_out_multiplier: Optional[float] = None
    # the FFN's gate projection output times the first before the activation, its output times the second
    # (Falcon-H1's mlp_multipliers, FalconH1MLP); None: no multiply
    ffn_multipliers: Optional[tuple[float, ...]] = None


def check(cfg: Any) -> None:
    """The fields ssm_parallel needs, and what it cannot be beside (one line each)."""
    given = [name for name in ("attn_in_multiplier", "attn_out_multiplier", "ssm_in_multiplier", "ssm_out_multiplier")
             if getattr(cfg, name) is not None]
    if given and not cfg.ssm_parallel:
        raise InputError(f"{given[0]} scales a mixer of ssm_parallel's layers: give ssm_parallel true")
    if cfg.ffn_multipliers is not None and len(cfg.ffn_multipliers) != 2:
        raise InputError(f"ffn_multipliers must give 2 numbers (gate, down); got {len(cfg.ffn_multipliers)}")
    if not cfg.ssm_parallel:
        return
    if cfg.ssm_heads is None or cfg.ssm_head_dim is None:
        raise InputError("ssm_parallel puts a Mamba2 mixer beside every layer's attention: give ssm_heads and "
                         "ssm_head_dim")
    if kinds.layer_plan(cfg) is not None or cfg.layer_pattern is not None or cfg.kv_lora_rank is not None:
        raise InputError("ssm_parallel gives every layer softmax attention beside Mamba2: no per-layer pattern, "
                         "layer_pattern or kv_lora_rank")
    if cfg.arch != "decoder" or cfg.cross_attention or cfg.parallel_block != "none":
        raise InputError("ssm_parallel describes a decoder's layers: arch decoder, no cross-attention, no "
                         "parallel block")


def from_flat(cfg: Any, i: int, causal: bool) -> ParallelMixers:
    return ParallelMixers(flat_attention.build(cfg, i, causal), mamba2.from_flat(cfg), cfg.attn_in_multiplier,
                          cfg.attn_out_multiplier, cfg.ssm_in_multiplier, cfg.ssm_out_multiplier)


KIND = register(MixerKind("attention beside Mamba2", ParallelFields, from_flat, check=check,
                          claims=lambda cfg, layer: bool(cfg.ssm_parallel),
                          group="attention and Mamba2 side by side (Falcon-H1)"))
