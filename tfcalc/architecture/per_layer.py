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


@dataclass(frozen=True)
class AltUp:
    """Gemma 3n's alternating updates (Baykal et al. 2023, "AltUp", NeurIPS; modeling_gemma3n.py Gemma3nTextAltUp):
    the residual stream is n streams of d; a block runs on the first (the active one) and the others follow.

    At the embeddings, streams 1..n-1 are d -> d projections of the token embeddings (each scaled to the first's
    RMS); at the end, each is projected back d -> d (scaled likewise) and the n averaged before the final norm
    (``io_weights``, ``io_linears``: 2·(n-1) matrices d × d). In each block, with a router d -> n of the RMS-normed
    active stream times 1/d, tanh'd (the modalities m): predict, every stream mixed by an n × n matrix read from m
    (n -> n², then (n, n) @ (n, d) per token) plus itself; correct, with the router of the block's output, each
    prediction plus (n -> n of m, plus 1) times the block's output less the active prediction; the active corrected
    stream times a learned d-wide scale (``correct_scale``) is what the per-layer input reads."""

    d_model: int
    n: int
    correct_scale: bool = True

    def weights(self, norm) -> list[Weight]:
        d, n = self.d_model, self.n
        out = [Weight("altup_router_weight", (n, d), "ffn", "AltUp router"),
               Weight("altup_prediction_weight", (n * n, n), "ffn", "AltUp prediction coefficients"),
               Weight("altup_correction_weight", (n, n), "ffn", "AltUp correction coefficients"),
               *norm.weights("altup_router_norm", "AltUp router norm")]
        return out + ([Weight("altup_output_scale", (d,), "ffn", "AltUp output scale")] if self.correct_scale else [])

    def linears(self) -> list[Linear]:
        d, n = self.d_model, self.n
        return [Linear("altup_router", "ffn", "AltUp router (predict and correct)", d, n, count=2),
                Linear("altup_prediction", "ffn", "AltUp prediction coefficients", n, n * n),
                Linear("altup_predict", "ffn", "AltUp prediction (n, n) @ (n, d)", n, n * d),
                Linear("altup_correction", "ffn", "AltUp correction coefficients", n, n)]

    def io_weights(self) -> list[Weight]:
        d, k = self.d_model, self.n - 1
        return [Weight("altup_in", (k, d, d), "embeddings", "AltUp stream projections in"),
                Weight("altup_out", (k, d, d), "embeddings", "AltUp stream projections out")]

    def io_linears(self) -> list[Linear]:
        d, k = self.d_model, self.n - 1
        return [Linear("altup_in", "embeddings", "AltUp stream projections in", d, d, count=k),
                Linear("altup_out", "embeddings", "AltUp stream projections out", d, d, count=k)]


@dataclass(frozen=True)
class Laurel:
    """Gemma 3n's learned augmented residual (LAuReL; modeling_gemma3n.py Gemma3nTextLaurelBlock): of the block's
    normed input h, h + norm(right(left(h))), left d -> r and right r -> d bias-free; added to the attention's
    residual sum, the two then times 2^-1/2."""

    d_model: int
    rank: int

    def weights(self, norm) -> list[Weight]:
        return [Weight("laurel_left_weight", (self.rank, self.d_model), "ffn", "LAuReL left"),
                Weight("laurel_right_weight", (self.d_model, self.rank), "ffn", "LAuReL right"),
                *norm.weights("laurel_norm", "LAuReL norm")]

    def linears(self) -> list[Linear]:
        return [Linear("laurel_left", "ffn", "LAuReL left", self.d_model, self.rank),
                Linear("laurel_right", "ffn", "LAuReL right", self.rank, self.d_model)]
