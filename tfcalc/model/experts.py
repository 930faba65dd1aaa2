"""The mixture of experts of the real model, its experts held as grouped tensors.

Each MoE layer stores its E routed experts as two (or, with biases, four) tensors -- ``experts.up.weight``
(E, m·f, d) with each expert's rows [gate | up] (m = 2 gated, else 1), ``experts.down.weight`` (E, d, f),
and the optional ``experts.up.bias`` (E, m·f) and ``experts.down.bias`` (E, d) of gpt-oss -- as
transformers 5 stores them (modeling_mixtral.py, MixtralExperts: gate_up_proj (E, 2f, d), down_proj
(E, d, f)), not as E FeedForward modules: DeepSeek-V3's 58 layers of 256 experts would be ~30,000
modules and seconds of Python objects to build, even on meta.

The experts multiply the tokens routed to them with batched matmuls over a slice of the experts
(``GroupedLinear``): an expert's rows (r, d) against its (d, m·f) weight cost 2·r·d·m·f FLOPs, so a
forward pass costs the top-k experts per token (k·N rows in all), whatever the routing, as
FlopCounterMode counts it (aten.bmm: 2·b·m·k·n) -- never all E experts per token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.architecture import FFN, MoE
from tfcalc.model import routing_input
from tfcalc.model.layers import FeedForward, Linear, ffn_hidden
from tfcalc.model.routing import route


class GroupedLinear(nn.Module):
    """n linear maps of one shape in one (n, out, in) weight and an optional (n, out) bias, left
    uninitialized (init_weights fills them, as tfcalc.model.layers.Linear)."""

    def __init__(self, n: int, in_features: int, out_features: int, bias: bool):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(n, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(n, out_features)) if bias else None

    def forward(self, x: torch.Tensor, first: int = 0) -> torch.Tensor:
        """(n', r, in) rows for the n' maps from ``first`` on -> (n', r, out): one batched matmul."""
        n = x.shape[0]
        y = torch.bmm(x, self.weight[first:first + n].mT)  # (n', r, out): 2·n'·r·in·out FLOPs
        return y if self.bias is None else y + self.bias[first:first + n, None, :]


class Experts(nn.Module):
    """E expert FFNs of one shape (``FFN``) as grouped tensors: up (E, m·f, d), rows [gate | up] per
    expert, then down (E, d, f)."""

    def __init__(self, spec: FFN, n_expert: int):
        super().__init__()
        self.spec, self.gated, self.width = spec, spec.gated, spec.d_ff
        self.up = GroupedLinear(n_expert, spec.d_model, spec.d_ff * (2 if spec.gated else 1), spec.bias)
        self.down = GroupedLinear(n_expert, spec.d_ff, spec.d_model, spec.bias)

    def forward(self, x: torch.Tensor, first: int = 0) -> torch.Tensor:
        """(n', r, d) rows for the experts ``first`` .. ``first + n' - 1`` -> (n', r, d)."""
        return self.down(ffn_hidden(self.spec, self.up(x, first)), first)


class MixtureOfExperts(nn.Module):
    """n_expert FFNs and a router (bias-free but in gpt-oss); each token runs its top-k experts, their outputs weighted
    by the softmax of the chosen router logits (Jiang et al. 2024, Mixtral, eq. 1-2), or (renormalize
    false) by their softmax over all experts, not renormalized (Qwen2-MoE with norm_topk_prob false). A
    shared expert, when described, runs on every token and is added, times sigmoid of a one-output gate
    (modeling_qwen2_moe.py, Qwen2MoeSparseMoeBlock).

    With a capacity factor (Switch Transformers, sec. 2.2) each expert runs a fixed buffer of C rows:
    the first C tokens routed to it, in position order, padded with zeros when fewer come; the rest are
    dropped (their residual carries them). The experts then multiply E·C rows, whatever the routing."""

    def __init__(self, spec: MoE):
        super().__init__()
        self.spec, self.n_expert = spec, spec.n_expert
        self.top_k, self.renormalize = spec.top_k, spec.renormalize
        self.router = Linear(spec.d_model, spec.n_expert, bias=spec.router_bias)
        if spec.routing.bias_buffer:  # DeepSeek-V3's e_score_correction_bias: a buffer, as in transformers
            self.register_buffer("score_bias", torch.zeros(spec.n_expert))
        self.experts = Experts(spec.expert, spec.n_expert)
        self.shared = FeedForward(spec.shared) if spec.shared is not None else None
        self.shared_gate = Linear(spec.d_model, 1, bias=False) if spec.shared_gate else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        flat = x.reshape(B * T, d)  # (N, d)
        out = self.routed(flat)
        if self.shared is not None:
            shared = self.shared(flat)
            out = out + (shared if self.shared_gate is None else torch.sigmoid(self.shared_gate(flat)) * shared)
        return out.view(B, T, d)

    def route(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, d) -> (weights, chosen experts), (N, k) each."""
        logits = self.router(flat)  # (N, E)
        if not self.spec.routing.is_default:  # DeepSeek's grouped, sigmoid, biased, scaled routing
            weights, chosen = route(logits, self.spec, getattr(self, "score_bias", None))
            return weights.to(flat.dtype), chosen
        if self.spec.sigmoid_input:  # Llama 4: the weights scale the experts' inputs (routed())
            return routing_input.route(logits, self.top_k)
        if self.renormalize:
            top, chosen = logits.topk(self.top_k, dim=-1)  # (N, k) each
            return top.float().softmax(dim=-1).to(flat.dtype), chosen
        weights, chosen = logits.float().softmax(dim=-1).topk(self.top_k, dim=-1)
        return weights.to(flat.dtype), chosen

    def routed(self, flat: torch.Tensor) -> torch.Tensor:
        """(N, d) -> (N, d): the weighted sum of each token's top-k experts."""
        weights, chosen = self.route(flat)
        capacity = self.spec.capacity(flat.shape[0])
        if flat.is_meta:
            return self._meta_forward(flat, weights, capacity)
        # The (token, slot) pairs sorted by expert, stably: each expert's tokens stay in position order.
        order = chosen.flatten().argsort(stable=True)  # (N·k,)
        token, slot = order // self.top_k, order % self.top_k
        counts = torch.bincount(chosen.flatten(), minlength=self.n_expert).tolist()
        out = torch.zeros_like(flat)
        for e, (tok, sl) in enumerate(zip(token.split(counts), slot.split(counts), strict=True)):
            if capacity is None and not counts[e]:
                continue  # an expert no token chose does no work
            if capacity is not None:
                tok, sl = tok[:capacity], sl[:capacity]  # past the capacity: dropped
            rows = flat.index_select(0, tok)  # (n_e, d)
            if capacity is not None:
                rows = F.pad(rows, (0, 0, 0, capacity - rows.shape[0]))  # (C, d): a fixed-size buffer
            if self.spec.sigmoid_input:  # Llama 4: the weight scales the input (padding rows stay 0)
                rows = rows * F.pad(weights[tok, sl], (0, rows.shape[0] - tok.shape[0]))[:, None]
                y = self.experts(rows[None], e)[0, : tok.shape[0]]  # (n_e, d)
            else:
                y = self.experts(rows[None], e)[0, : tok.shape[0]] * weights[tok, sl, None]  # (n_e, d)
            out.index_add_(0, tok, y)
        return out

    def _meta_forward(self, flat: torch.Tensor, weights: torch.Tensor, capacity: int | None) -> torch.Tensor:
        """On meta there are no values, so no routing (nonzero cannot run): the N·k token-expert pairs are
        dealt out evenly instead, in contiguous runs, one run per expert (C rows each with a capacity), and
        multiplied as at most two batched matmuls (the first N·k mod E experts take one row more). Any
        routing does the same matmul FLOPs, since the experts together always see N·k rows (E·C with a
        capacity); the output depends on every expert, so a backward pass counts theirs too."""
        n_pairs, E, d = flat.shape[0] * self.top_k, self.n_expert, flat.shape[1]
        pairs = flat.repeat_interleave(self.top_k, dim=0)  # (N·k, d): each token once per chosen expert
        if capacity is not None:
            pairs = F.pad(pairs, (0, 0, 0, max(0, capacity * E - n_pairs)))[: capacity * E]
            y = self.experts(pairs.view(E, capacity, d)).reshape(-1, d)  # (E·C, d)
        else:
            q, rem = divmod(n_pairs, E)
            split = rem * (q + 1)
            ys = [self.experts(pairs[:split].view(rem, q + 1, d)).reshape(-1, d)] if rem else []
            if q:
                ys.append(self.experts(pairs[split:].view(E - rem, q, d), rem).reshape(-1, d))
            y = torch.cat(ys)  # (N·k, d)
        y = F.pad(y, (0, 0, 0, max(0, n_pairs - y.shape[0])))[:n_pairs]  # (N·k, d): dropped pairs are 0
        return (y.view(*weights.shape, -1) * weights[..., None]).sum(dim=1)  # (N, d)
