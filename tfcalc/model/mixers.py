"""How the torch side builds a block's token mixer: the component names its module, and this resolves it.

A mixer component (tfcalc.architecture.mixer) says which torch module runs it in its ``module`` attribute,
"package.module:Class" (a string, so tfcalc.architecture never imports torch), or the class itself; the
Block builds ``resolve(spec.module)(spec)`` and never tests the component's class (vLLM's model registry
does the same: architecture name -> "module:Class", imported when first asked for).

A torch mixer module (``MixerModule``) answers, beside ``forward(x, rope, mask, store=None)`` -> (B, T, d):

- ``new_state(batch, max_tokens, device, dtype)``: its generation state, allocated once at a fixed shape, an
  object the runtime drives through the state protocol of tfcalc.model.cache; a speculative run adds
  ``spare=k`` (the slots a window's or chunk's ring keeps beyond its span for a verify of k + 1 tokens,
  tfcalc.model.attention_state), asked only of mixers whose component declares ``rewind``;
- ``at_layer(index, count)``: told its layer's index and the stack's depth (a no-op unless it needs them);
- ``rope_key``: the rotary table it reads (tfcalc.model.positions.rope_key), None where it reads none, and
  ``temperature``: Llama 4's query scale on NoPE layers (None: none);
- ``fused_rows()``: {part: rows} of its fused projection (an attention's [Q | K | V]), which
  tfcalc.measure.params splits into the breakdown's parts; {} where it fuses nothing;
- tensor parallelism as a real run does it (tfcalc.measure.parallelize): ``tp_refusal(spec)`` (a class
  method: why a run under TP is refused, None where it runs), ``tp_localize(tp)`` (its fused rows re-ordered
  so each rank's block holds its part of every piece, its head counts made local) and ``tp_plan(seq)``
  ({its submodule: DTensor parallel style}).
"""

from __future__ import annotations

import functools
import importlib

import torch
from torch import nn

from tfcalc.errors import InputError


class MixerModule(nn.Module):
    """The defaults of what a torch mixer module answers (module docstring): no rotary table, no temperature,
    no fused projection."""

    rope_key: tuple | None = None
    temperature: tuple[int, float] | None = None

    def fused_rows(self) -> dict[str, int]:
        return {}

    def at_layer(self, index: int, count: int) -> None:
        """Told its layer's index in its stack and the stack's depth, once built (MiniMax's lightning decay
        depends on both, modeling_minimax.py get_slope_rate); the default needs neither."""

    def new_state(self, batch: int, max_tokens: int, device, dtype):
        raise InputError(f"{type(self).__name__} keeps no generation state: it is not built for decoding")

    @classmethod
    def tp_refusal(cls, spec) -> str | None:
        return f"{cls.__name__} under TP is planned, not run"  # a module with no TP plan of its own

    def tp_localize(self, tp: int) -> None:
        raise NotImplementedError(self.tp_refusal(self.spec))

    def tp_plan(self, seq) -> dict:
        raise NotImplementedError(self.tp_refusal(self.spec))


def interleave_rows(weight: torch.Tensor, parts: list[int], tp: int) -> torch.Tensor:
    """Rows [A | B | C] -> [A₀ B₀ C₀ | A₁ B₁ C₁ | ...]: rank r's contiguous block holds its part of each."""
    pieces = [part.chunk(tp, dim=0) for part in weight.split(parts, dim=0)]
    return torch.cat([p[r] for r in range(tp) for p in pieces], dim=0)


@torch.no_grad()
def interleave(linear: nn.Module, parts: list[int], tp: int) -> None:
    """A fused Linear's weight and bias rows interleaved in place (``interleave_rows``)."""
    for p in (linear.weight, linear.bias):
        if p is not None:
            p.copy_(interleave_rows(p, parts, tp))


@functools.cache
def _import(target: str) -> type:
    path, _, name = target.partition(":")
    try:
        return getattr(importlib.import_module(path), name)
    except (ImportError, AttributeError) as e:
        raise InputError(f"mixer module {target!r} cannot be imported: {e}") from e


def resolve(target) -> type:
    """The torch module class a component's ``module`` names ("package.module:Class"), or the class given."""
    return _import(target) if isinstance(target, str) else target


def build_mixer(spec) -> nn.Module:
    """The torch module of a mixer component (or of a block's cross-attention), built from it."""
    target = getattr(spec, "module", None)
    if target is None:
        raise InputError(f"{type(spec).__name__} names no torch module (its ``module``): it is counted, not built")
    return resolve(target)(spec)


def tie_shared(mixers: list[nn.Module]) -> None:
    """A mixer whose weights are another layer's (Zamba2's shared blocks: its ``shared_key``) holds that layer's
    parameters, each module its own (so a FLOP counter names each use by its layer); called again after
    to_empty(), which gives every module storage of its own."""
    owners: dict = {}
    for mixer in mixers:
        key = getattr(mixer, "shared_key", None)
        if key is not None and key in owners:
            mixer.share(owners[key])
        elif key is not None:
            owners[key] = mixer
