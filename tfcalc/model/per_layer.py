"""Per-layer inputs in the real model (Gemma 4's and Gemma 3n's PLE; tfcalc.architecture.per_layer says what each
step computes, as modeling_gemma4.py's Gemma4TextModel and Gemma4TextDecoderLayer do): ``PerLayerInputs`` at the
stack's embeddings makes every token's (B, T, L, p) inputs as the stack embeds its tokens, and keeps them for the
forward under way; each block's ``PerLayerGate`` reads its layer's slice. A stack binds its gates to it as it is
built (``bind``), so every path that embeds tokens (the uncached forward, a prefill, a decode step, rows of
continuous batching) hands each block the inputs of the tokens it runs."""

from __future__ import annotations

import math

import torch
from torch import nn

from tfcalc.model.ffn import ACTIVATIONS
from tfcalc.model.layers import Linear, empty_embedding, make_norm


class PerLayerInputs(nn.Module):
    """Steps 1-3: (B, T) ids and their (B, T, d) embeddings -> (B, T, L, p)."""

    def __init__(self, spec):
        super().__init__()
        self.n_layer, self.width = spec.n_layer, spec.width
        self.table = empty_embedding(spec.vocab, spec.n_layer * spec.width)
        self.proj = Linear(spec.d_model, spec.n_layer * spec.width, bias=False)
        self.norm = make_norm(spec.norm)
        self.inputs: torch.Tensor | None = None  # the forward's, (B, T, L, p)

    def forward(self, idx: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        shape = (B, T, self.n_layer, self.width)
        idx = torch.where((idx >= 0) & (idx < self.table.num_embeddings), idx, 0)  # Gemma 3n: past the table, row 0
        token = self.table(idx).view(shape) * math.sqrt(self.width)  # Gemma4TextScaledWordEmbedding: × √p
        context = self.norm((self.proj(x) * x.shape[-1] ** -0.5).view(shape))  # × d^-1/2, normed over p
        self.inputs = (context + token) * 2 ** -0.5
        return self.inputs


class PerLayerGate(nn.Module):
    """A block's step: h + norm(out(act(gate(h)) · input_i))."""

    def __init__(self, spec, norm):
        super().__init__()
        self.gate = Linear(spec.d_model, spec.width, bias=False)
        self.out = Linear(spec.width, spec.d_model, bias=False)
        self.norm = make_norm(norm)
        self.act = ACTIVATIONS[spec.activation]
        self.source: tuple = ()  # (the stack's PerLayerInputs, this layer's index): set by bind
        self.index = 0

    def bind(self, inputs: PerLayerInputs, index: int) -> None:
        self.source, self.index = (inputs,), index

    def delta(self, h: torch.Tensor) -> torch.Tensor:
        """norm(out(act(gate(h)) · input_i)): what is added (Gemma 3n adds it to AltUp's other streams)."""
        x = self.source[0].inputs[:, :, self.index]  # (B, T, p)
        return self.norm(self.out(self.act(self.gate(h)) * x))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.delta(h)
