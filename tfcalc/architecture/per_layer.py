"""Per-layer inputs (Gemma 4's and Gemma 3n's per-layer embeddings, PLE; modeling_gemma4.py Gemma4TextModel
get_per_layer_inputs, project_per_layer_inputs and Gemma4TextDecoderLayer): beside the token table, every token
gets a small input of p channels for each of the L layers, and each layer adds what it makes of its own.

At the embeddings (``PerLayerInputs``), with x the (scaled) token embeddings, d wide:

1. a second token table of V_p rows, L·p wide, its rows times √p (per_layer_embedding; show apart in the
   breakdown: these are parameters of the model, looked up, never multiplied);
2. a projection d -> L·p of x, times d^-1/2, each layer's p channels RMS-normed (one norm of p weights);
3. the two summed, times 2^-1/2: (B, T, L, p), layer i's slice read by block i.

In each block, after its FFN's residual add (``PerLayerGate``), with h the block's stream: h + norm(out(act(gate(h))
· input_i)), gate d -> p and out p -> d bias-free, act the FFN's activation, norm an RMSNorm d wide.

FLOPs: 2·d·L·p per token at the embeddings (the projection; the lookup is none), 4·d·p per token in each block;
the product with the input, the activation and the norms are non-matmul work. No state: nothing grows with the
context. Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfcalc.architecture.norm import Norm
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError


@dataclass(frozen=True)
class PerLayerInputs:
    """Steps 1-3: the per-layer table, the projection of the embeddings and its norm (``norm`` p wide)."""

    vocab: int
    n_layer: int
    width: int  # p
    d_model: int
    norm: Norm

    def __post_init__(self) -> None:
        if min(self.vocab, self.n_layer, self.width, self.d_model) < 1 or self.norm.width != self.width:
            raise InputError("per-layer inputs need a positive vocabulary, depth and width, and a norm p wide")

    def weights(self) -> list[Weight]:
        wide = self.n_layer * self.width
        return [Weight("per_layer_embedding", (self.vocab, wide), "embeddings", "per-layer token embeddings"),
                Weight("per_layer_projection", (wide, self.d_model), "embeddings", "per-layer input projection"),
                *self.norm.weights("per_layer_projection_norm", "per-layer input projection norm")]

    def linears(self) -> list[Linear]:
        return [Linear("per_layer_projection", "embeddings", "per-layer input projection", self.d_model,
                       self.n_layer * self.width)]


@dataclass(frozen=True)
class PerLayerGate:
    """A block's use of its per-layer input (the module docstring): gate d -> p, out p -> d, a norm d wide."""

    d_model: int
    width: int  # p
    activation: str = "gelu_tanh"  # the FFN's (Gemma 4: hidden_activation)

    def weights(self, norm: Norm) -> list[Weight]:
        d, p = self.d_model, self.width
        return [Weight("ple_gate_weight", (p, d), "ffn", "per-layer input gate"),
                Weight("ple_out_weight", (d, p), "ffn", "per-layer input projection"),
                *norm.weights("ple_post_norm", "per-layer input norm")]

    def linears(self) -> list[Linear]:
        return [Linear("ple_gate", "ffn", "per-layer input gate", self.d_model, self.width),
                Linear("ple_out", "ffn", "per-layer input projection", self.width, self.d_model)]
