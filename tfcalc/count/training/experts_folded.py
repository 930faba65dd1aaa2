"""Experts folded over the attention's ranks (``--etp``): MoE Parallel Folding (Liu et al. 2025, "MoE
Parallel Folding", arXiv 2504.14960, sec. 3; Megatron-Core's ``expert_tensor_parallel_size`` and
``expert_model_parallel_size``, megatron/core/transformer/moe/README.md). Pure arithmetic.

The legacy layout (``etp`` None, tfcalc.count.training.sharding step 1) takes the expert-parallel group
from the data-parallel ranks (E divides dp) and keeps each rank's experts whole on every TP rank. Folding
lays a second grid over the same tp·cp·dp ranks of a pipeline stage for the experts alone:

1. The grid. The attention runs on TP × CP × DP (Megatron's order tp-cp-dp); the experts on
   ETP × EP × EDP, in the order etp-ep-edp (parallel_state's expert rank generator, "tp-ep-dp" with
   tp = ETP), so an ETP group is ETP adjacent ranks, an EP group E ranks ETP apart (spanning ETP·E
   consecutive ranks), and each routed expert is replicated over EDP = tp·cp·dp / (E·ETP) ranks, ETP·E
   apart: world / (E·ETP·PP) in the paper's words. E·ETP must divide tp·cp·dp, E every mixture's experts,
   ETP each expert's hidden width. Qwen3-235B at TP 2 × DP 16 with EP 32 (Megatron's "EP 32 = TP 2 ×
   DP 16") is one such grid: ETP 1, EDP 1.
2. Per-rank expert states: n_expert / E experts, each split ETP ways as Megatron's TP splits an MLP (gate
   and up by rows, down by columns: ``expert_local_shape``). Their gradients are reduced, and ZeRO's
   flat buffers (the distributed optimizer) and FSDP2 split, over the EDP group: Megatron-Core's
   separate expert buffer on ``expert_data_parallel`` (tfcalc.count.training.sharding.split_states).
   Everything else (attention, router, shared experts, dense layers, embeddings) keeps the attention
   grid: TP-split and reduced over dp·cp.
3. Tokens. Megatron-Core requires sequence parallelism for a mixture of experts under TP > 1
   (TransformerConfig: "When using expert parallelism and tensor parallelism, sequence parallelism must
   be used"; training/arguments.py asserts it for any MoE with TP > 1), so folding with tp > 1 needs --sp:
   the MoE block takes the SP shard [S/TP, B, H] as it is -- no all-gather before the router, no
   reduce-scatter after the combine (MoELayer on the local shard; tfcalc.count.training.comm cause 3
   counts TP collectives only for the shared expert, TP-split as a dense FFN). So each rank routes,
   permutes and dispatches its own T_r = b·s / (cp·tp) tokens (``rank_tokens``): its router, top-k and
   permutes run on T_r rows. No all-gather over the SP ranks comes first: MoEAlltoAllTokenDispatcher takes
   the [S/TP, B, H] shard and runs permute -> A2A(EP) -> AG(ETP) -> experts -> RS(ETP) -> A2A(EP) ->
   unpermute (megatron/core/transformer/moe/token_dispatcher.py, its docstring), which is what is modelled
   here; its ``tp_group`` is the expert-TP group. (MoEAllGatherTokenDispatcher instead all-gathers the tokens
   over TP × EP and reduce-scatters them back: not modelled.) The router's weight sees only the rank's shard, so its
   gradient is partial over TP and is all-reduced with the norms' (Megatron's router sets
   ``sequence_parallel`` on its weight; comm cause 5).
4. Collectives per MoE layer and micro-batch, k routed copies a token, h = d_model, e activation bytes:
   - ep_tokens: the dispatch and the combine forward, their gradients backward: 4 all-to-alls of
     T_r·k·h·e over the EP group (tfcalc.count.training.experts_parallel steps 1-3 with T_r for T);
   - etp_tokens (ETP > 1): the received rows all-gathered over the ETP group before the experts
     (gather_from_sequence_parallel_region on the expert-TP group) and the experts' partial outputs
     reduce-scattered after; backward the reverse (a reduce-scatter of the gathered input's gradient,
     an all-gather of the output's). Under balanced routing a rank receives T_r·k rows, so each of the
     2 all-gathers and 2 reduce-scatters has payload ETP·T_r·k·h·e (tfcalc.count.training.comm's
     convention: the gathered tensor). Each of the ETP ranks then multiplies ETP·T_r·k rows at 1/ETP of
     the width: the same FLOPs as T_r·k rows whole;
   - expert_grads / expert_params: the experts' gradient reduction (and ZeRO gathers) over EDP.
   Per rank, expert FLOPs are therefore 1/tp of the legacy layout's (where every TP rank ran all b·s
   tokens through its whole experts).
5. Not modelled: folding without sequence parallelism at tp > 1 (refused, as Megatron refuses it), with
   HSDP, and the ETP-gathered expert input's activation bytes (ETP·T_r·k·h: the activation model keeps
   T_r·k·h, exact at ETP 1).
"""

from __future__ import annotations

from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.errors import InputError, shown
from tfcalc.workload import Layout


def folded(layout: Layout) -> bool:
    """Whether the experts have a grid of their own (step 1): ``--etp`` given or implied."""
    return layout.etp is not None


def resolve_fold(has_moe: bool, layout: Layout) -> Layout:
    """The layout with ``etp`` 1 where folding is implied and --etp was not given: a mixture of experts under
    --sp, or whose EP the legacy grid cannot lay out (E not dividing dp, or context parallelism) but tp·cp·dp
    can (the legacy grid keeps all three out). Otherwise as given."""
    from dataclasses import replace

    if layout.etp is None and has_moe and (layout.sequence_parallel or implied(layout.ep, layout.tp, layout.cp,
                                                                              layout.dp)):
        return replace(layout, etp=1)  # (an E dividing neither is refused by the legacy grid's check)
    return layout


def implied(ep: int, tp: int, cp: int, dp: int) -> bool:
    """Whether EP ``ep`` needs the folded grid at tp·cp·dp (``resolve_fold``): the legacy one takes it from dp
    alone, without CP."""
    return ep > 1 and (dp % ep != 0 or cp > 1) and (tp * cp * dp) % ep == 0


def expert_data_ranks(layout: Layout) -> int:
    """EDP, the ranks each routed expert is replicated over (step 1)."""
    return layout.tp * layout.cp * layout.dp // (layout.ep * layout.etp)


def rank_tokens(layout: Layout) -> int:
    """T_r, the tokens one rank routes and dispatches per micro-batch: b·s/cp/tp folded (step 3), b·s in the
    legacy grid (every TP rank routes all of them; cp is 1 there)."""
    tokens = layout.micro_batch * layout.seq // layout.cp
    return tokens // layout.tp if folded(layout) else tokens


def expert_local_shape(name: str, shape: tuple[int, ...], etp: Optional[int]) -> tuple[int, ...]:
    """One expert tensor's shape on ETP rank 0 (step 2): gate/up (and their bias) split along rows, down
    along columns, the down bias and anything else whole."""
    if not etp or etp == 1:
        return shape
    if "_up_" in name or "_gate_" in name:  # a routed expert's (sharding.routed_expert): column-parallel
        return (-(-shape[0] // etp), *shape[1:])
    if name.endswith("down_weight") and len(shape) == 2:
        return (shape[0], -(-shape[1] // etp))
    return shape


def group_span(group: str, layout: Layout) -> Optional[int]:
    """Consecutive ranks the expert grid's group spans (step 1), None for the attention grid's groups."""
    if not folded(layout):
        return None
    E, T = layout.ep, layout.etp
    return {"etp": T, "ep": T * E, "edp": layout.tp * layout.cp * layout.dp}.get(group)


def group_stride(group: str, layout: Layout) -> Optional[int]:
    """Distance between neighbouring ranks of the expert grid's group (step 1), None for the others."""
    if not folded(layout):
        return None
    return {"etp": 1, "ep": layout.etp, "edp": layout.ep * layout.etp}.get(group)


def check_fold(cfg: ModelConfig, layout: Layout, counts: list[int]) -> None:
    """Raise InputError, one line, for a folded grid the layout cannot take (step 1)."""
    L = layout
    etp = L.etp
    if isinstance(etp, bool) or not isinstance(etp, int) or etp < 1:
        raise InputError(f"--etp must be a positive integer; got {shown(etp)}")
    if not counts:
        raise InputError(f"--etp {etp}: {cfg.name} is dense (no mixture of experts) -- expert tensor parallelism "
                         "splits routed experts")
    ranks = L.tp * L.cp * L.dp
    if ranks % (L.ep * etp):
        raise InputError(f"--ep {L.ep} × --etp {etp} = {L.ep * etp} must divide tp × cp × dp = {ranks}: the experts' "
                         "grid folds over the attention's ranks")
    widths = sorted({b.ffn.expert.d_ff for _, b, _ in cfg.architecture.kinds() if b.is_moe})
    bad = [f for f in widths if f % etp]
    if bad:
        raise InputError(f"--etp {etp} does not divide the experts' hidden width ({bad[0]}) of {cfg.name}")
    if L.tp > 1 and not L.sequence_parallel:
        raise InputError(f"experts folded over tp {L.tp} need --sp: each TP rank dispatches its own sequence shard "
                         "(Megatron-Core requires sequence parallelism for MoE under tensor parallelism)")
    if L.hsdp is not None:
        raise InputError("--hsdp with experts folded over TP × DP (--etp) is not modelled: give one")


def describe(layout: Layout) -> str:
    """The folded grid in words ('' when not folded)."""
    if not folded(layout):
        return ""
    return f"experts ep {layout.ep} × etp {layout.etp} × edp {expert_data_ranks(layout)} over tp·cp·dp"
