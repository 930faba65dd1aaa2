"""The mixture of experts of the real model, its experts held as grouped tensors.

Each MoE layer stores its E routed experts as two (or, with biases, four) tensors -- ``experts.up.weight``
(E, m·f, d) with each expert's rows [gate | up] (m = 2 gated, else 1), ``experts.down.weight`` (E, d, f),
and the optional ``experts.up.bias`` (E, m·f) and ``experts.down.bias`` (E, d) of gpt-oss -- as
transformers 5 stores them (modeling_mixtral.py, MixtralExperts: gate_up_proj (E, 2f, d), down_proj
(E, d, f)), not as E FeedForward modules: DeepSeek-V3's 58 layers of 256 experts would be ~30,000
modules and seconds of Python objects to build, even on meta.

The forward never waits for the host: the (token, slot) pairs are sorted by expert on the device (a
stable argsort, so each expert's tokens stay in position order), the groups' ends found by a binary
search of the sorted ids (tfcalc.model.grouped.expert_ends), and each projection is one grouped matmul
over all P = N·k pairs (tfcalc.model.grouped.grouped_matmul: PyTorch's grouped GEMM, or gathered weights
for decode and where the grouped GEMM is missing). No shape depends on the routing: a forward of N tokens
runs the same ops on the same shapes whatever the router chose. An expert's rows (r, d) against its
(d, m·f) weight cost 2·r·d·m·f FLOPs, so a forward pass costs the top-k experts per token (k·N rows in
all), as FlopCounterMode counts it -- never all E experts per token.

With a capacity (Switch Transformers, sec. 2.2) the pairs are written into E buffers of C rows (a gather
by slot: each slot holds its pair's token, or a zero row), the experts run as one batched matmul over
(E, C, d), and each kept pair reads its row back.

Continuous batching's free rows (tfcalc.model.slots) run through the layer too (one shape for every
occupancy), but take no capacity: given ``rows`` (B,), 1 for a sequence in flight, their pairs are sorted
after every expert's (a virtual expert E, so they move no pair in flight in its queue) and dropped, and an
expert keeps C' = ceil(c·k·N'/E) of its pairs, N' the tokens in flight (a device tensor: the buffers keep
their C rows, so no shape changes with the occupancy). Each row in flight gets what the rows in flight
alone, in the same order, would give it.
"""

from __future__ import annotations

from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.architecture import FFN, MoE
from tfcalc.model import beside, routing_input
from tfcalc.model.ffn import FeedForward, ffn_hidden
from tfcalc.model.grouped import expert_ends, grouped_matmul
from tfcalc.model.layers import Linear
from tfcalc.model.routing import hash_route, route


class GroupedLinear(nn.Module):
    """n linear maps of one shape in one (n, out, in) weight and an optional (n, out) bias, left
    uninitialized (init_weights fills them, as tfcalc.model.layers.Linear)."""

    def __init__(self, n: int, in_features: int, out_features: int, bias: bool):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(n, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(n, out_features)) if bias else None

    def forward(self, x: torch.Tensor, first: int = 0, ends: torch.Tensor | None = None,
                experts: torch.Tensor | None = None) -> torch.Tensor:
        """(n', r, in) rows for the n' maps from ``first`` on -> (n', r, out): one batched matmul; or, given
        the groups' ``ends`` and each row's map ``experts``, (P, in) rows sorted by map -> (P, out): one
        grouped matmul (tfcalc.model.grouped)."""
        if ends is not None:
            y = grouped_matmul(x, self.weight, ends, experts)  # (P, out): 2·P·in·out FLOPs
            return y if self.bias is None else y + self.bias.index_select(0, experts)
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

    def fused_rows(self) -> dict[str, int]:
        """Each expert's rows of the grouped up projection: [gate | up] when gated (tfcalc.measure.params)."""
        return {"gate": self.width, "up": self.width} if self.gated else {"up": self.width}

    def forward(self, x: torch.Tensor, first: int = 0, ends: torch.Tensor | None = None,
                experts: torch.Tensor | None = None) -> torch.Tensor:
        """(n', r, d) rows for the experts ``first`` .. ``first + n' - 1`` -> (n', r, d); or (P, d) rows sorted
        by expert, with the groups' ``ends`` and each row's expert -> (P, d)."""
        hidden = ffn_hidden(self.spec, self.up(x, first, ends, experts))
        return self.down(hidden, first, ends, experts)


class MixtureOfExperts(nn.Module):
    """n_expert FFNs and a router (bias-free but in gpt-oss); each token runs its top-k experts, their outputs weighted
    by the softmax of the chosen router logits (Jiang et al. 2024, Mixtral, eq. 1-2), or (renormalize
    false) by their softmax over all experts, not renormalized (Qwen2-MoE with norm_topk_prob false). A
    shared expert, when described, runs on every token and is added, times sigmoid of a one-output gate
    (modeling_qwen2_moe.py, Qwen2MoeSparseMoeBlock).

    With a capacity factor (Switch Transformers, sec. 2.2) each expert runs a fixed buffer of C rows:
    the first C tokens routed to it, in position order, padded with zeros when fewer come; the rest are
    dropped (their residual carries them). The experts then multiply E·C rows, whatever the routing.
    Nothing is read back to the host: see the module docstring."""

    def __init__(self, spec: MoE):
        super().__init__()
        self.spec, self.n_expert = spec, spec.n_expert
        self.top_k, self.renormalize = spec.top_k, spec.renormalize
        self.router = Linear(spec.d_model, spec.n_router, bias=spec.router_bias)  # real and zero experts
        if spec.routing.bias_buffer and not spec.hash_vocab:  # DeepSeek-V3's e_score_correction_bias: a buffer
            self.register_buffer("score_bias", torch.zeros(spec.n_router))
        if spec.hash_vocab:  # DeepSeek-V4's hash routing: the experts of each token id, a buffer as transformers'
            self.register_buffer("tid2eid", torch.zeros(spec.hash_vocab, spec.top_k, dtype=torch.long))
        self.tokens: torch.Tensor | None = None  # hash routing: the token ids of the rows, set by the stack's embed
        self.experts = Experts(spec.expert, spec.n_expert)
        if spec.latent:  # Nemotron 3 Super (NemotronHMoE's fc1_latent_proj, fc2_latent_proj): d -> L -> experts -> d
            self.latent_in = Linear(spec.d_model, spec.latent, bias=spec.expert.bias)
            self.latent_out = Linear(spec.latent, spec.d_model, bias=spec.expert.bias)
        self.shared = FeedForward(spec.shared) if spec.shared is not None else None
        self.shared_gate = Linear(spec.d_model, 1, bias=False) if spec.shared_gate else None
        self.beside = beside.Beside(spec) if spec.beside_mlp is not None else None  # Gemma 4 (tfcalc.model.beside)

    def reset_buffers(self) -> None:
        """init_weights' hash table (DeepSeek-V4): token v's j-th expert (v·k + j) mod E, spread evenly
        (transformers starts it at 0: every token to expert 0)."""
        table = getattr(self, "tid2eid", None)
        if table is not None:
            V, k = table.shape
            table.copy_((torch.arange(V * k, device=table.device) % self.n_expert).view(V, k))

    def forward(self, x: torch.Tensor, rows: torch.Tensor | None = None,
                raw: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, d) -> (B, T, d); ``rows`` (B,): 1 for a sequence in flight, 0 for a free row that takes no
        expert capacity (the module docstring); None: every row in flight. ``raw``: the block's input before its
        norm, which Gemma 4's router and experts read (tfcalc.model.beside)."""
        B, T, d = x.shape
        flat = x.reshape(B * T, d)  # (N, d)
        live = None if rows is None else rows.bool()[:, None].expand(B, T).reshape(B * T)  # (N,)
        if self.beside is not None:
            return self.beside(self, flat, raw.reshape(B * T, d), live).view(B, T, d)
        out = self.routed(flat, live)
        shared = self.shared_part(flat)
        return (out if shared is None else out + shared).view(B, T, d)

    def shared_part(self, flat: torch.Tensor) -> torch.Tensor | None:
        """(N, d) -> the shared expert's output (gated where it is), or None without one."""
        if self.shared is None:
            return None
        shared = self.shared(flat)
        return shared if self.shared_gate is None else torch.sigmoid(self.shared_gate(flat)) * shared

    def parts(self, x: torch.Tensor, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, T, d) -> (the routed experts' output, the shared expert's or None), apart: LongCat-Flash's
        shortcut block adds them to the stream at different places (tfcalc.model.block)."""
        B, T, d = x.shape
        flat = x.reshape(B * T, d)  # (N, d)
        live = None if rows is None else rows.bool()[:, None].expand(B, T).reshape(B * T)  # (N,)
        shared = self.shared_part(flat)
        return self.routed(flat, live).view(B, T, d), None if shared is None else shared.view(B, T, d)

    def route(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, d) -> (weights, chosen experts), (N, k) each, every chosen expert a real one (``real_picks``)."""
        return self.real_picks(*self._route(flat))[:2]

    def real_picks(self, weights: torch.Tensor, chosen: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(weights, chosen) over the real and zero-computation experts -> (weights, chosen) with each zero pick
        moved to the last real expert at weight 0, so the routed rows are k per token whatever the router chose
        (tfcalc.architecture.ffn, step 5), and (N, 1) the zero picks' summed weight (LongcatFlashExperts:
        identity_expert(x) times its weight; None without zero experts: no kernel)."""
        if not self.spec.n_zero:
            return weights, chosen, None
        real = chosen < self.n_expert  # (N, k)
        identity = torch.where(real, 0, weights).sum(dim=-1, keepdim=True)  # (N, 1)
        return torch.where(real, weights, 0), torch.where(real, chosen, self.n_expert - 1), identity

    def _route(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, d) -> (weights, chosen experts), (N, k) each, over the real and zero-computation experts."""
        logits = self.router(flat)  # (N, E + Z)
        if self.spec.hash_vocab:  # DeepseekV4HashRouter: the table's experts, weighed by the router's scores
            return hash_route(logits, self.spec, self.tid2eid.index_select(0, self.tokens.reshape(-1)), flat.dtype)
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

    def routed(self, flat: torch.Tensor, live: torch.Tensor | None = None, routing=None) -> torch.Tensor:
        """(N, d) -> (N, d): the weighted sum of each token's top-k experts; ``live`` (N,) bool: the tokens in
        flight, the others taking no capacity (module docstring); ``routing``: (weights, chosen) made elsewhere."""
        weights, chosen, identity = self.real_picks(*self._route(flat)) if routing is None else (*routing, None)
        if self.spec.latent:  # routed on the full width, the experts run in L (tfcalc.architecture.ffn, step 7)
            return self.latent_out(self._run(self.latent_in(flat), weights, chosen, None, live))  # (N, L) -> (N, d)
        return self._run(flat, weights, chosen, identity, live)

    def _run(self, flat: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor, identity: torch.Tensor | None,
             live: torch.Tensor | None) -> torch.Tensor:
        """(N, w) rows with their routing -> (N, w): the experts' weighted sum, w the experts' width."""
        capacity = self.spec.capacity(flat.shape[0])
        if capacity is not None and live is not None:  # a free row's pairs after every expert's: expert E
            chosen = torch.where(live[:, None], chosen, self.n_expert)
        pair_expert = chosen.flatten()  # (P,), P = N·k: pair i is token i // k's slot i % k
        order = pair_expert.argsort(stable=True)  # (P,): by expert, each expert's pairs in position order
        expert = pair_expert.index_select(0, order)  # (P,) ascending
        token = order.div(self.top_k, rounding_mode="floor")  # (P,)
        w = weights.flatten().index_select(0, order)  # (P,): each sorted pair's routing weight
        if capacity is None:  # a free row's pairs run and are discarded with its row: no pair in flight moves
            out = self._dropless(flat, token, expert, w)
            return out if identity is None else out + identity * flat  # zero experts: x times their weight
        return self._buffered(flat, token, expert, w, capacity, None if live is None else self._kept(live))

    def _kept(self, live: torch.Tensor) -> torch.Tensor:
        """The capacity of the tokens in flight, ceil(c·k·N'/E) (MoE.capacity, with c as the exact fraction
        it is there), a 0-d device tensor: nothing read back."""
        c = Fraction(str(self.spec.capacity_factor))
        num, den = c.numerator * self.top_k, c.denominator * self.n_expert
        return (live.sum() * num + den - 1).div(den, rounding_mode="floor")

    def _dropless(self, flat: torch.Tensor, token: torch.Tensor, expert: torch.Tensor,
                  w: torch.Tensor) -> torch.Tensor:
        """Every pair runs: one grouped matmul per projection over the P sorted rows."""
        ends = expert_ends(expert, self.n_expert)  # (E,) int32, on the device
        rows = flat.index_select(0, token)  # (P, d)
        if self.spec.sigmoid_input:  # Llama 4: the weight scales the expert's input
            y = self.experts(rows * w[:, None], ends=ends, experts=expert)  # (P, d)
        else:
            y = self.experts(rows, ends=ends, experts=expert) * w[:, None]  # (P, d)
        return torch.zeros_like(flat).index_add(0, token, y)

    def _buffered(self, flat: torch.Tensor, token: torch.Tensor, expert: torch.Tensor, w: torch.Tensor,
                  capacity: int, kept: torch.Tensor | None = None) -> torch.Tensor:
        """Each expert runs its first C pairs in a buffer of C rows (zero rows where fewer came), all E
        buffers as one batched matmul; the pairs past an expert's C are dropped (add 0). With ``kept`` (the
        capacity of the tokens in flight, a device tensor <= C) an expert keeps that many, and the free rows'
        pairs (expert E, sorted last) none."""
        (N, d), E, C, P = flat.shape, self.n_expert, capacity, token.shape[0]
        dev = flat.device
        starts = torch.searchsorted(expert, torch.arange(E + 1, device=dev, dtype=expert.dtype))  # (E + 1,)
        pos = torch.arange(P, device=dev) - starts.index_select(0, expert)  # (P,): place in its expert's queue
        keep = pos < C if kept is None else (pos < kept) & (expert < E)
        dest = torch.where(keep, expert * C + pos, E * C)  # (P,): its buffer row, or a spare row past the end
        slot_pair = torch.full((E * C + 1,), P, device=dev).scatter_(0, dest, torch.arange(P, device=dev))
        slot_pair = slot_pair[:-1]  # (E·C,): the pair in each buffer row, P where the row is empty
        if self.spec.sigmoid_input:  # Llama 4: scale each pair's row, then fill the buffers from the pairs
            source, index = flat.index_select(0, token) * w[:, None], slot_pair  # (P, d)
        else:
            source, index = flat, F.pad(token, (0, 1), value=N).index_select(0, slot_pair)  # (N, d), (E·C,)
        buffer = F.pad(source, (0, 0, 0, 1)).index_select(0, index)  # (E·C, d): the spare last row is 0
        y = self.experts(buffer.view(E, C, d)).view(E * C, d)  # one batched matmul: 2·E·C·d·m·f FLOPs
        back = y.index_select(0, torch.where(keep, dest, 0))  # (P, d): each pair's output row
        if self.spec.sigmoid_input:
            back = torch.where(keep[:, None], back, 0)
        else:
            back = back * torch.where(keep, w, 0)[:, None]
        return torch.zeros_like(flat).index_add(0, token, back)
