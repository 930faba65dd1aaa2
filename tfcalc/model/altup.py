"""Gemma 3n's AltUp streams and LAuReL in the real model (tfcalc.architecture.per_layer says what each computes, as
modeling_gemma3n.py's Gemma3nTextModel, Gemma3nTextAltUp, Gemma3nTextLaurelBlock and Gemma3nTextDecoderLayer do).
The stack's residual stream is the n streams side by side, (B, T, n·d) (``Streams``: made from the token embeddings
as the stack embeds them, merged back to (B, T, d) before the final norm), so every path that runs blocks between
the embeddings and the head carries them unchanged; a block with AltUp (``block_forward``) runs its attention and
FFN on the active stream."""

from __future__ import annotations

import math

import torch
from torch import nn

from tfcalc.model.layers import Linear, make_norm


def _rescaled(y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """y scaled to the RMS ``target`` (B, T, 1), its own RMS floored at sqrt(1e-5)."""
    return y * target / torch.sqrt(torch.mean(y ** 2, dim=-1, keepdim=True).clamp(min=1e-5))


class Streams(nn.Module):
    """The n - 1 projections in (streams from the embeddings) and out (back to one stream), (n - 1, d, d) each."""

    def __init__(self, spec):
        super().__init__()
        self.n, k, d = spec.n, spec.n - 1, spec.d_model
        self.proj_in = nn.Parameter(torch.empty(k, d, d))
        self.proj_out = nn.Parameter(torch.empty(k, d, d))

    def forward(self, x: torch.Tensor, merge: bool = False) -> torch.Tensor:
        """``expand`` (the embeddings' side), or ``merge`` (the head's): one module call either way, so that
        FlopCounterMode counts its matmuls under it (tfcalc.measure.flops)."""
        return self.merge(x) if merge else self.expand(x)

    def expand(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, n·d): x, then each projection of x scaled to x's RMS."""
        target = torch.mean(x ** 2, dim=-1, keepdim=True) ** 0.5
        return torch.cat([x] + [_rescaled(x @ w.T, target) for w in self.proj_in], dim=-1)

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, n·d) -> (B, T, d): stream 0 and each other stream projected back (scaled to stream 0's RMS),
        averaged."""
        streams = x.unflatten(-1, (self.n, -1))  # (B, T, n, d)
        first = streams[..., 0, :]
        target = torch.mean(first ** 2, dim=-1, keepdim=True) ** 0.5
        back = [_rescaled(streams[..., i + 1, :] @ w.T, target) for i, w in enumerate(self.proj_out)]
        return torch.stack([first] + back, dim=0).mean(dim=0)


class AltUp(nn.Module):
    """One block's predict and correct (tfcalc.architecture.per_layer.AltUp)."""

    def __init__(self, spec, norm):
        super().__init__()
        d, n = spec.d_model, spec.n
        self.n = n
        self.router_norm = make_norm(norm)
        self.router = Linear(d, n, bias=False)
        self.prediction = Linear(n, n * n, bias=False)
        self.correction = Linear(n, n, bias=False)
        self.output_scale = nn.Parameter(torch.empty(d)) if spec.correct_scale else None

    def forward(self, streams: torch.Tensor, activated: torch.Tensor | None = None) -> torch.Tensor:
        """``predict`` (no ``activated``) or ``correct``: one module call either way (tfcalc.measure.flops)."""
        return self.predict(streams) if activated is None else self.correct(streams, activated)

    def modalities(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, n): tanh of the router over the normed stream times 1/d."""
        routed = self.router(self.router_norm(x) * (1.0 / x.shape[-1]))
        return torch.tanh(routed.float()).type_as(x)

    def predict(self, streams: torch.Tensor) -> torch.Tensor:
        """(B, T, n, d) -> (B, T, n, d): C @ streams + streams, C (n, n) per token from the active stream."""
        m = self.modalities(streams[..., 0, :])
        coefs = self.prediction(m).unflatten(-1, (self.n, self.n))  # (B, T, n, n): row i mixes stream i
        return (coefs @ streams + streams).type_as(streams)

    def correct(self, predictions: torch.Tensor, activated: torch.Tensor) -> torch.Tensor:
        """Each prediction plus (correction(m) + 1) times the innovation activated - active prediction."""
        m = self.modalities(activated)
        coefs = self.correction(m) + 1.0  # (B, T, n)
        innovation = (activated - predictions[..., 0, :])[..., None, :]  # (B, T, 1, d)
        return (innovation * coefs[..., None] + predictions).type_as(activated)


class Laurel(nn.Module):
    """h + norm(right(left(h)))."""

    def __init__(self, spec, norm):
        super().__init__()
        self.left = Linear(spec.d_model, spec.rank, bias=False)
        self.right = Linear(spec.rank, spec.d_model, bias=False)
        self.norm = make_norm(norm)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.norm(self.right(self.left(h)))


def block_forward(block, x: torch.Tensor, rope, mask, store, rows) -> torch.Tensor:
    """A Gemma 3n block over the streams (B, T, n·d) -> (B, T, n·d) (Gemma3nTextDecoderLayer.forward)."""
    altup = block.altup
    streams = x.unflatten(-1, (altup.n, -1))  # (B, T, n, d)
    predictions = altup(streams)  # predict
    active = predictions[..., 0, :]
    h = block.attn_norm(active)
    laurel = block.laurel(h) if block.laurel is not None else h
    attn = block.attn_post_norm(block.attn(h, rope, mask, store=store))
    mixed = (active + attn + laurel) * (1 / math.sqrt(2)) if block.laurel is not None else active + attn
    out = mixed + block.ffn_post_norm(block.ffn_call(rows)(block.ffn_norm(mixed)))
    corrected = altup(predictions, out)  # correct
    first = corrected[..., 0, :]
    if altup.output_scale is not None:
        first = (first.type_as(altup.output_scale) * altup.output_scale).type_as(first)
    if block.ple is not None:  # added to the other streams, not the active one
        corrected = torch.cat([corrected[..., :1, :], corrected[..., 1:, :] + block.ple.delta(first)[..., None, :]],
                              dim=-2)
    return corrected.flatten(-2)
