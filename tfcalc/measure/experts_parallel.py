"""Expert parallelism on the real model (``plan --ep E --measure``): each mixture of experts keeps its
n_expert / E local experts and exchanges the tokens by all-to-all, as tfcalc.count.training.experts_parallel plans.

What a layer does on each of the E ranks of the group (GShard's dispatch and combine; the order of
torchtitan's ``ExpertParallel`` and Megatron-Core's ``MoEAlltoAllTokenDispatcher``):

1. route every local token (the router is replicated), sort the (token, slot) pairs by expert;
2. exchange the pairs' counts per expert (``all_to_all_single`` of n_expert int64: ``ep_counts``), so each
   rank knows how many rows it receives from each source for each of its experts;
3. dispatch: ``all_to_all_single`` of the sorted rows, each rank's run for the experts another rank holds
   sent there (``ep_tokens``); run each local expert on the rows it received from every source;
4. combine: the outputs sent back the same way, weighted by the router and summed per token.
The two token exchanges run through ``torch.distributed.nn.functional.all_to_all_single``, whose backward
is the mirror all-to-all, so a micro-batch runs 4 token all-to-alls per layer and 1 of counts.

Each rank's dispatch hands over its own T·k rows; what it receives depends on the routing, so the combine
(and the dispatch's backward) move the rows it received: the payloads of a rank are exact as a mean over
the group (every row sent is received once), not rank by rank (tfcalc.report.plan_check compares means).
The experts' parameters are local and skipped by DDP (their replicas, dp / ep, are one rank here: the run
takes ep = dp, tp 1, DDP), the rest of the model is DDP as in any data-parallel run.
"""

from __future__ import annotations

import types

import torch
import torch.distributed as dist
from torch import nn

from tfcalc.errors import InputError
from tfcalc.model.experts import MixtureOfExperts


def moe_modules(model: nn.Module) -> list[tuple[str, MixtureOfExperts]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, MixtureOfExperts)]


def apply_ep(model: nn.Module, group, ep: int, rank: int) -> list[str]:
    """Keep each mixture's experts rank·n .. rank·n + n - 1 (n = n_expert / ep) and route through the
    all-to-alls; returns the names of the expert parameters (local to the rank: DDP must skip them)."""
    names = []
    for name, m in moe_modules(model):
        if m.spec.n_zero:  # their identity term is the one-process forward's (MixtureOfExperts.routed)
            raise InputError("an expert-parallel run of zero-computation experts (LongCat-Flash) is planned, not run")
        n = m.n_expert // ep
        first = rank * n
        for part in ("up", "down"):
            linear = getattr(m.experts, part)
            for pname in ("weight", "bias"):
                p = getattr(linear, pname)
                if p is not None:
                    setattr(linear, pname, nn.Parameter(p.detach()[first:first + n].clone()))
                    names.append(f"{name}.experts.{part}.{pname}")
        m.ep_group, m.ep, m.ep_local = group, ep, n
        m.routed = types.MethodType(_routed, m)
    return names


def _routed(self: MixtureOfExperts, flat: torch.Tensor, live: torch.Tensor | None = None) -> torch.Tensor:
    """(N, d) -> (N, d): steps 1-4 of the module docstring. ``live`` (continuous batching's rows in flight,
    tfcalc.model.experts) never reaches an expert-parallel run: every row of a training step is live."""
    if live is not None:
        raise ValueError("an expert-parallel run routes every row: rows in flight are for one-process decoding")
    weights, chosen = self.route(flat)  # (N, k) each
    if self.spec.latent:  # a latent MoE dispatches its L-wide rows (tfcalc.architecture.ffn, step 7)
        return self.latent_out(_exchange(self, self.latent_in(flat), weights, chosen))
    return _exchange(self, flat, weights, chosen)


def _exchange(self: MixtureOfExperts, flat: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor
              ) -> torch.Tensor:
    """(N, w) rows and their routing -> (N, w): steps 1-4's sort, dispatch, local experts and combine."""
    from torch.distributed.nn.functional import all_to_all_single

    ep, n, group = self.ep, self.ep_local, self.ep_group
    order = chosen.flatten().argsort(stable=True)  # (N·k,): the pairs sorted by expert
    token, slot = order // self.top_k, order % self.top_k
    counts = torch.bincount(chosen.flatten(), minlength=self.n_expert)  # (E,) int64
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts, group=group)  # step 2: from each source, per local expert
    received = received.view(ep, n)
    send = counts.view(ep, n).sum(1).tolist()
    recv = received.sum(1).tolist()
    rows = flat.index_select(0, token)  # (N·k, d), by expert
    got = all_to_all_single(flat.new_empty(sum(recv), flat.shape[1]), rows, recv, send, group=group)  # step 3
    out = torch.zeros_like(got)
    # got is [source 0: expert 0's rows, expert 1's, ... | source 1: ...]; run each local expert on its rows
    starts = torch.cat([received.new_zeros(1), received.flatten().cumsum(0)[:-1]]).view(ep, n).tolist()
    sizes = received.tolist()
    for j in range(n):
        # on the rows' device: a CPU index into CUDA rows is an error (index_select, index_add)
        index = torch.cat([torch.arange(starts[s][j], starts[s][j] + sizes[s][j], device=got.device)
                           for s in range(ep)])
        if index.numel():
            out = out.index_add(0, index, self.experts(got.index_select(0, index)[None], j)[0])
    back = all_to_all_single(flat.new_empty(rows.shape), out, send, recv, group=group)  # step 4
    return torch.zeros_like(flat).index_add(0, token, back * weights[token, slot, None])
