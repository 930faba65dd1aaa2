"""The layers of a stack whose activation terms differ: a mixture of experts that keeps some layers dense
(first_dense_layers, moe_every; tfcalc.architecture.flat), folded over ``cfg.architecture``. Pure
arithmetic; tfcalc.count.activations prices each kind of layer with its own block function.
"""

from __future__ import annotations

from typing import Callable

from tfcalc.config import ModelConfig


class _DenseLayer:
    """A mixture of experts' dense layer seen as a dense config: its own FFN width, no experts."""

    def __init__(self, cfg: ModelConfig, d_ff: int):
        self._cfg, self.ffn_dim = cfg, d_ff

    n_expert = shared_expert_d_ff = expert_capacity_factor = None
    experts_active = 1

    def __getattr__(self, name: str):
        return getattr(self._cfg, name)


def layer_list(cfg: ModelConfig, moe_terms: dict[str, int],
               block: Callable[..., dict[str, int]]) -> tuple[dict[str, int], ...]:
    """Each output-stack layer's terms where a mixture of experts keeps some layers dense
    (first_dense_layers, moe_every, dense_layers: tfcalc.architecture.flat), folded over cfg.architecture; () when
    every layer keeps the same terms."""
    if not cfg.n_expert or not (cfg.first_dense_layers or cfg.moe_every or cfg.dense_layers):
        return ()
    dense: dict[int, dict[str, int]] = {}
    for b in cfg.architecture.output.layers():
        if not b.is_moe and b.ffn.d_ff not in dense:
            dense[b.ffn.d_ff] = block(_DenseLayer(cfg, b.ffn.d_ff))
    return tuple(moe_terms if b.is_moe else dense[b.ffn.d_ff] for b in cfg.architecture.output.layers())

