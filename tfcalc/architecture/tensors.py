"""The two things every component of an architecture lists: its parameter tensors and its matmuls.

Name-free in the sense that matters: a ``Weight`` carries its breakdown key (``q_weight``, local to its
component; the block and stack add their prefixes), its shape and the role it plays, never the module path
of any implementation. Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, Optional

# Roles, the groups of the parameter breakdown (tfcalc.count.model.params.GROUPS).
Role = Literal["embeddings", "attention", "cross_attention", "ffn", "norms", "pooler", "lm_head"]
# How Megatron tensor parallelism splits a tensor (tfcalc.count.training.shard): dim 0 ("rows", column-parallel),
# dim 1 ("cols", row-parallel), or kept whole on every rank (None).
Split = Literal["rows", "cols", None]


@dataclass(frozen=True)
class Weight:
    """One parameter tensor of a component: ``copies`` of shape ``shape`` per layer that holds it."""

    name: str  # breakdown key local to the component; the block and stack prefix it
    shape: tuple[int, ...]
    role: Role
    label: str  # what a reader calls it
    tp: Split = None
    # the stored tensor this one is concatenated into, rows in listing order (Q, K, V in "qkv"; gate, up in
    # "up"): fused as gpt-fast's ``wqkv`` and litgpt's ``attn.qkv`` fuse them, so a TP plan splits the
    # fused rows (tfcalc.count.training.shard); None: stored alone
    fused: Optional[str] = None
    copies: int = 1  # per layer: n_expert for each expert's tensors
    experts_active: Optional[int] = None  # an expert's tensor: a token uses this many of the copies
    tied_to: Optional[str] = None  # shares storage with that tensor (a tied LM head): counted there, not here
    # the reports' group where it is not ``role``: a token mixer's tensors under its declared role (a Mamba2
    # in_proj's "ssm", tfcalc.architecture.mixer.MixerRole), set by the block that places it
    part: Optional[str] = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape) * self.copies

    def named(self, prefix: str) -> "Weight":
        return replace(self, name=prefix + self.name)


@dataclass(frozen=True)
class Linear:
    """``count`` matmuls a component runs per forward: (rows, n_in) @ (n_in, n_out), 2·count·rows·n_in·n_out FLOPs.

    ``rows`` names what the rows are, resolved by the FLOP fold: "tokens" (every token of the stack),
    "sources" (the states cross-attention reads), "routed" (the token rows a mixture of experts hands
    its experts: top-k per token, or the capacity buffers), "first" (each sequence's first token), "keys"
    (the positions attended to: the tokens in a forward pass, the whole context in a decode step; a latent
    attention's expansion of its cache, tfcalc.architecture.latent)."""

    name: str
    role: str  # the FLOP group: attention_proj, cross_attention_proj, ffn, pooler, lm_head
    label: str
    n_in: int
    n_out: int
    rows: Literal["tokens", "sources", "routed", "first", "keys"] = "tokens"
    count: int = 1  # matmuls of this shape: one per head for a latent attention's absorbed W_UK and W_UV
    part: Optional[str] = None  # the reports' FLOP group where it is not ``role`` (as ``Weight.part``)

    def named(self, prefix: str) -> "Linear":
        return replace(self, name=prefix + self.name)


def norm_weights(name: str, label: str, width: int, bias: bool) -> list[Weight]:
    """A norm's scale (and shift) vectors, ``width`` wide, kept whole under TP."""
    out = [Weight(f"{name}_weight", (width,), "norms", f"{label} weight")]
    return out + ([Weight(f"{name}_bias", (width,), "norms", f"{label} bias")] if bias else [])
