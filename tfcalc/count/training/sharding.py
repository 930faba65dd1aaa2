"""Sharding and precision variants of a training layout (issue 20): expert parallelism, FP8 matmuls, FSDP
without resharding after forward, HSDP, an fp32 gradient buffer, offload. Their checks, and the groups a
rank's model states are split over. Pure arithmetic, no torch.

1. Expert parallelism, ``ep`` E (Lepikhin et al. 2020, GShard, sec. 2.2; Megatron-Core's
   ``expert_model_parallel_size``; torchtitan's EP, which borrows its ranks from the data-parallel
   dimension): each mixture of experts' routed experts are dealt out over E ranks, n_expert / E each.
   The group: E adjacent data-parallel ranks (Megatron's order: stride tp, so it spans tp·E GPUs), so E
   divides dp and every mixture's n_expert. Each routed expert is then replicated over dp / E ranks (the
   expert-data-parallel group, Megatron-Core's ``expert_data_parallel``), which reduce its gradients and
   over which ZeRO splits its states; every other tensor (attention, router, shared experts, dense
   FFNs, embeddings) is replicated over all dp ranks as before. Under tensor parallelism a rank's
   experts stay whole (tfcalc's TP does not split experts), so the TP ranks of one EP rank hold the same
   experts and each dispatches its own copy of the tokens.
2. ``grad_dtype`` fp32: the gradients accumulate and are reduced in an fp32 buffer beside bf16 weights
   (Megatron's ``main_grad``, --accumulate-allreduce-grads-in-fp32): 4 bytes per gradient element, in
   memory and on the wire. The Megatron Core guide's table ("Distributed Optimizer",
   docs.nvidia.com/megatron-core/developer-guide/latest/distrib_optimizer.html): float16 parameters with
   fp32 gradients take 18 bytes per parameter, 6 + 12/d with the distributed optimizer (ZeRO-1).
3. ``hsdp`` R (PyTorch FSDP2 on a 2-D mesh, ``fully_shard(mesh=(replicate, shard))``; Zhao et al. 2023,
   "PyTorch FSDP", sec. 3.2.2, hybrid sharding): ZeRO-3 within groups of R adjacent DP ranks, replicated
   over the dp / R groups: weights, gradients and optimizer states split R ways; each micro-batch's
   gradients reduce-scattered within the group and the shard all-reduced across the replicas.
4. ``reshard_after_forward`` False (FSDP2 ``fully_shard(reshard_after_forward=False)``, ZeRO-3 only):
   each unit stays gathered from its forward to its backward, so a micro-batch gathers every block once,
   not twice, and the rank holds the whole stage's weights unsharded at the end of the forward pass.
5. ``compute_dtype`` fp8: see tfcalc.count.training.fp8. 6. Offload: see tfcalc.count.training.offload.
7. ``zero_engine`` "torch" (ZeRO-1 as PyTorch ships it, ``torch.distributed.optim.ZeroRedundancyOptimizer``
   beside DDP; what ``plan --zero 1 --measure`` runs): the gradients all-reduced whole by DDP, as ZeRO-0;
   the optimizer states of whole tensors, dealt out greedily -- largest first, each to the rank with the
   fewest elements so far (its ``_partition_parameters``) -- so a rank holds Adam states for its tensors,
   not ⌈Ψ/N⌉ of a flat buffer; after the step each rank broadcasts its tensors to the others, one bucket
   per rank (``parameters_as_bucket_view=True``): N broadcasts of Ψ·e_w in all. The default, "flat", is
   the plan's ZeRO-1 (DeepSpeed's and Megatron's: a flat buffer reduce-scattered and all-gathered).
8. ``zero_engine`` "deepspeed" (--zero-engine deepspeed; ZeRO 0 or 1, bf16 weights, --grad-dtype fp32): DeepSpeed's
   BF16_Optimizer, as BLOOM trained (Megatron-DeepSpeed). Its states are the flat ones of "flat", and the bf16
   ``.grad`` autograd writes stays allocated beside the fp32 accumulation buffer: the pipeline engine clears it
   before each micro-batch's backward (``clear_lp_grads``) and adds it into the fp32 buffer after, keeping it
   (``update_hp_grads(clear_lp_grads=False)``, deepspeed/runtime/pipe/engine.py ``_exec_backward_pass``;
   deepspeed/runtime/bf16_optimizer.py), so the next forward's activations come on top of it: e_w·Ψ more
   gradient bytes, 6 a parameter in all (Megatron's main_grad, written by the fused weight-gradient GEMM,
   keeps none: "flat").
"""

from __future__ import annotations

import functools
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model import op_recompute
from tfcalc.count.model.dtypes import BITS_PER_ELEMENT
from tfcalc.count.perf.fp8_recipes import RECIPES
from tfcalc.count.training import experts_folded
from tfcalc.count.training.shard import tp_local_shape
from tfcalc.errors import InputError, shown
from tfcalc.workload import Layout

COMPUTE_DTYPES = ("fp8",)
ZERO_ENGINES = ("flat", "torch", "deepspeed")
GRAD_DTYPES = ("fp32",)
OFFLOAD = ("optimizer", "activations")
DISPATCHERS = ("auto", "alltoall", "deepep")  # --ep-dispatch (tfcalc.count.training.experts_parallel, step 3)


def dispatcher(layout: Layout, nodes: int) -> str:
    """Step 3's dispatcher of the layout whose EP group spans ``nodes`` nodes."""
    if layout.ep_dispatch != "auto":
        return layout.ep_dispatch
    return "deepep" if nodes > 1 else "alltoall"


def ep_nodes(layout: Layout, gpus_per_node: int) -> int:
    """Nodes the EP group spans: E ranks tp apart (Megatron's order), gpus_per_node / tp of them in a node;
    folded, etp apart (tfcalc.count.training.experts_folded, step 1)."""
    stride = layout.etp if experts_folded.folded(layout) else layout.tp
    per_node = min(layout.ep, max(1, gpus_per_node // stride))
    return -(-layout.ep // per_node)


def check_dispatch(value: object) -> str:
    if not isinstance(value, str) or value not in DISPATCHERS:
        raise InputError(f"--ep-dispatch must be one of {', '.join(DISPATCHERS)}; got {shown(value)}")
    return value


def routed_expert(name: str) -> bool:
    """Whether a stored tensor (tfcalc.count.training.shard.Tensor.name) is a routed expert's, one copy per expert."""
    return name.startswith(("expert_", "encoder_expert_"))


def expert_counts(cfg: ModelConfig) -> list[int]:
    """n_expert of every kind of block with a mixture of experts."""
    return list(_expert_counts(cfg))


@functools.lru_cache(maxsize=64)  # a search checks many layouts of one model
def _expert_counts(cfg: ModelConfig) -> tuple[int, ...]:
    return tuple(sorted({b.ffn.n_expert for _, b, _ in cfg.architecture.kinds() if b.is_moe}))


@functools.lru_cache(maxsize=64)
def _op_unsupported(cfg: ModelConfig) -> Optional[str]:
    return next((w for _, b, _ in cfg.architecture.kinds() if (w := op_recompute.unsupported(b))), None)


def expert_dp(layout: Layout) -> int:
    """Ranks each routed expert is replicated over: dp / ep (step 1); folded, tp·cp·dp / (ep·etp)
    (tfcalc.count.training.experts_folded)."""
    if experts_folded.folded(layout):
        return experts_folded.expert_data_ranks(layout)
    return layout.dp // layout.ep


def experts_apart(layout: Layout) -> bool:
    """Whether the routed experts' states are a group of their own (their own flat buffer, FSDP units and
    reductions): under expert parallelism, or folded over other ranks than the dense tensors' dp·cp."""
    return layout.ep > 1 or (experts_folded.folded(layout) and expert_dp(layout) != layout.data_ranks)


def shard_dp(layout: Layout) -> int:
    """Ranks ZeRO splits the non-expert states over: the HSDP group (step 3), else all data-parallel
    ranks (dp × cp: Layout.data_ranks)."""
    return layout.hsdp if layout.hsdp is not None else layout.data_ranks


def grad_element_bytes(layout: Layout) -> int:
    """Bytes of one gradient element, in memory and on the wire (step 2)."""
    return BITS_PER_ELEMENT[layout.grad_dtype or layout.dtype] // 8


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer; got {shown(value)}")
    return value


def check_model_variants(cfg: ModelConfig, ep: Optional[int], recompute: Optional[str], attention: str) -> None:
    """What the model itself rules out, whatever the layout (before a search, whose layouts would all be
    refused without a word of why): expert parallelism of a dense model, op recompute of blocks it does not
    model."""
    if ep is not None and ep > 1 and not expert_counts(cfg):
        raise InputError(f"--ep {ep}: {cfg.name} is dense (no mixture of experts) -- expert parallelism "
                         "splits routed experts")
    if recompute == "op":
        why = _op_unsupported(cfg) or (None if attention == "flash" else "the math attention kernel")
        if why is not None:
            raise InputError(f"--recompute op is not modelled for {why} (it is for dense blocks with flash attention)")


def check_sharding(cfg: ModelConfig, layout: Layout) -> None:
    """Raise InputError, one line, for a sharding or precision variant the layout cannot take."""
    L = layout
    ep = _positive_int("--ep", L.ep)
    check_dispatch(L.ep_dispatch)
    if not isinstance(L.fp8_recipe, str) or L.fp8_recipe not in RECIPES:
        raise InputError(f"--fp8-recipe must be one of {', '.join(RECIPES)}; got {shown(L.fp8_recipe)}")
    if L.fp8_recipe != "delayed" and L.compute_dtype != "fp8":
        raise InputError(f"--fp8-recipe {L.fp8_recipe} is a recipe of FP8 matmuls: it needs --compute-dtype fp8")
    if ep > 1:
        check_model_variants(cfg, ep, None, L.attention)
        counts = expert_counts(cfg)
        bad = [n for n in counts if n % ep]
        if bad:
            raise InputError(f"--ep {ep} does not divide the {bad[0]} routed experts of {cfg.name}")
    if experts_folded.folded(L):  # the experts' own grid over tp·cp·dp (experts_folded, step 1)
        experts_folded.check_fold(cfg, L, expert_counts(cfg))
    elif ep > 1:
        if L.dp % ep:
            raise InputError(f"--ep {ep}: the expert-parallel group is made of data-parallel ranks, so ep must "
                             f"divide dp ({L.dp}) -- or, with --etp, tp × cp × dp ({L.tp * L.cp * L.dp})")
        if L.hsdp is not None:
            raise InputError("--ep with --hsdp is not modelled: give one")
    # context parallelism folds the cp ranks into the data-parallel group the states shard over
    # (Layout.data_ranks); the expert and HSDP groups are not stated over it yet
    if L.cp > 1 and ((ep > 1 and not experts_folded.folded(L)) or L.hsdp is not None):
        raise InputError(f"--cp {L.cp} with {'--ep' if ep > 1 else '--hsdp'} is not modelled: give one")
    if L.compute_dtype is not None and (not isinstance(L.compute_dtype, str) or L.compute_dtype not in COMPUTE_DTYPES):
        raise InputError(f"--compute-dtype must be fp8 (the default: --dtype); got {shown(L.compute_dtype)}")
    if L.grad_dtype is not None and (not isinstance(L.grad_dtype, str) or L.grad_dtype not in GRAD_DTYPES):
        raise InputError(f"--grad-dtype must be fp32 (the default: the weights' dtype); got {shown(L.grad_dtype)}")
    if L.grad_dtype == "fp32" and BITS_PER_ELEMENT.get(L.dtype, 32) >= 32:
        raise InputError(f"--grad-dtype fp32 is a buffer beside narrower weights; --dtype {L.dtype} has fp32 "
                         "gradients already")
    for name, value in (("reshard_after_forward", L.reshard_after_forward), ("offload_optimizer", L.offload_optimizer),
                        ("offload_activations", L.offload_activations)):
        if not isinstance(value, bool):
            raise InputError(f"{name} must be True or False; got {shown(value)}")
    if L.zero_engine not in ZERO_ENGINES:
        raise InputError(f"zero_engine must be one of {', '.join(ZERO_ENGINES)}; got {shown(L.zero_engine)}")
    if L.zero_engine == "torch" and (L.zero != 1 or L.tp > 1 or L.pp > 1 or L.ep > 1 or L.cp > 1):
        raise InputError("ZeroRedundancyOptimizer (zero_engine torch) is ZeRO-1 beside DDP: tp 1, pp 1, ep 1, cp 1")
    if L.zero_engine == "deepspeed" and (L.zero > 1 or L.grad_dtype != "fp32"):
        raise InputError("--zero-engine deepspeed is DeepSpeed's BF16_Optimizer: ZeRO 0 or 1 with --grad-dtype fp32 "
                         "(its fp32 gradient accumulation)")
    check_model_variants(cfg, None, L.recompute, L.attention)
    if not L.reshard_after_forward and L.zero != 3:
        raise InputError("--no-reshard-after-forward keeps FSDP's gathered weights: it needs --zero 3 (or --fsdp)")
    if L.hsdp is not None:
        r = _positive_int("--hsdp", L.hsdp)
        if L.zero != 3:
            raise InputError(f"--hsdp {r} shards as FSDP does, within groups of {r} ranks: it needs --zero 3 "
                             "(or --fsdp)")
        if r == L.dp:
            raise InputError(f"--hsdp {r} equals dp ({L.dp}): that is plain FSDP (leave out --hsdp)")
        if L.dp % r:
            raise InputError(f"--hsdp {r} must divide dp ({L.dp}): the dp / R groups each hold one copy of the shards")


def describe(layout: Layout) -> str:
    """The variants in words, for a layout's one-line description ('' when none is set)."""
    L, parts = layout, []
    if experts_folded.folded(L):
        parts.append(experts_folded.describe(L))
    elif L.ep > 1:
        parts.append(f"ep {L.ep}")
    if L.hsdp is not None:
        parts.append(f"HSDP {L.hsdp} × {L.dp // L.hsdp}")
    if not L.reshard_after_forward:
        parts.append("no reshard after forward")
    if L.compute_dtype:
        parts.append(f"{L.compute_dtype} matmuls")
    if L.grad_dtype:
        parts.append(f"{L.grad_dtype} grads")
    if L.zero_engine == "deepspeed":
        parts.append("DeepSpeed BF16_Optimizer")
    offload = [w for w, on in (("optimizer", L.offload_optimizer), ("activations", L.offload_activations)) if on]
    if offload:
        parts.append(f"{' and '.join(offload)} offloaded")
    return ", ".join(parts)


def local_shape(t, layout: Layout) -> tuple[int, ...]:
    """A stored tensor's (tfcalc.count.training.shard.Tensor) shape on TP rank 0, a routed expert's on ETP rank 0
    where the experts are folded (tfcalc.count.training.experts_folded, step 2)."""
    shape = tp_local_shape(t, layout.tp)
    return experts_folded.expert_local_shape(t.name, shape, layout.etp) if routed_expert(t.name) else shape


def local_copies(name: str, copies: int, layout: Layout) -> int:
    """Copies of a stored tensor one rank holds: a routed expert's split over ep ranks (step 1)."""
    return copies // layout.ep if routed_expert(name) else copies


def split_states(psi_dense: int, psi_expert: int, layout: Layout) -> list[tuple[int, int]]:
    """(elements, ranks they are split over) of the flat ZeRO-1/2 buffers: one buffer over shard_dp
    without expert parallelism (tfcalc.count.training.rank_memory's convention), else the dense parameters over
    dp and the rank's experts over dp / ep (Megatron's separate expert buffer)."""
    if not experts_apart(layout):
        return [(psi_dense + psi_expert, shard_dp(layout))]
    return [(psi_dense, layout.data_ranks), (psi_expert, expert_dp(layout))]  # data_ranks: dp (cp 1 unfolded)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def flat_shard(groups: list[tuple[int, int]]) -> int:
    """Elements one rank holds of the flat buffers (⌈Ψ/N⌉ each)."""
    return sum(ceil_div(psi, n) for psi, n in groups if psi)


def greedy_rank0_elements(sizes: list[int], ranks: int) -> int:
    """Elements of the tensors ZeroRedundancyOptimizer gives rank 0 (step 7): sizes largest first, each to
    the rank with the fewest elements so far, the lowest rank on a tie."""
    mine, totals = 0, [0] * ranks
    for n in sorted(sizes, reverse=True):
        r = totals.index(min(totals))
        totals[r] += n
        mine += n if r == 0 else 0
    return mine


def greedy_rank0_grouped(groups: dict[int, int], ranks: int) -> int:
    """greedy_rank0_elements of ``groups`` {tensor elements: how many tensors} without a list of every
    tensor (a 2**40-layer stage's would not fit in memory). Items of one size n, given totals t_r, go one
    by one to the least (total, rank): the c items of the size take the c least of the slots (t_r + k·n,
    r), k ≥ 0 -- each rank's slots rise, so the greedy order is their merged order. Found by bisection on
    the c-th slot's value V: every slot below V is taken, then the ranks with a slot at V, lowest first."""
    totals, mine = [0] * ranks, 0
    for n, c in sorted(groups.items(), reverse=True):
        if n == 0:  # an empty tensor changes no total
            continue
        if c <= 4 * ranks:  # few: one by one, as greedy_rank0_elements
            for _ in range(c):
                r = totals.index(min(totals))
                totals[r] += n
                mine += n if r == 0 else 0
            continue
        lo, hi = min(totals), min(totals) + c * n  # count(hi) >= c: the least rank alone has c slots to hi
        while lo < hi:  # the least V whose slots at or below it number c or more
            mid = (lo + hi) // 2
            if sum((mid - t) // n + 1 for t in totals if t <= mid) >= c:
                hi = mid
            else:
                lo = mid + 1
        below = [-(-(lo - t) // n) if t < lo else 0 for t in totals]  # slots < V, each rank
        left = c - sum(below)  # taken at V, lowest rank first
        for r, t in enumerate(totals):
            at = left > 0 and t <= lo and (lo - t) % n == 0
            left -= at
            totals[r] = t + n * (below[r] + at)
            mine += n * (below[r] + at) if r == 0 else 0
    return mine


# Buckets of the flat ZeRO-1/2 buffers (calls, not bytes: the bytes are the buffer's whatever the buckets):
# ZeRO-1 as Megatron-Core's distributed optimizer, whose DDP buckets hold max(40,000,000, 1,000,000 × dp)
# parameters when the gradient reduction overlaps the backward pass, as the plan's step time assumes
# (megatron/core/distributed/distributed_data_parallel_config.py, bucket_size: "larger DP sizes need
# larger buckets to ensure collectives do not become latency-bound"); one reduce-scatter and one
# all-gather per bucket. ZeRO-2 as DeepSpeed's stage 2, reduce_bucket_size and allgather_bucket_size of
# 5e8 elements (deepspeed/runtime/zero/config.py), reduced every micro-batch; DeepSpeed reduces each
# bucket by a reduce to each partition's owner (stage_1_and_2.py, average_tensor), counted here as one
# reduce-scatter per bucket (the same bytes). tfcalc's measured runs use neither: --zero 1 --measure runs
# ZeroRedundancyOptimizer and --zero 2 --measure FSDP2 (tfcalc.report.plan_check), planned as such.
MEGATRON_BUCKET, MEGATRON_BUCKET_PER_RANK = 40_000_000, 1_000_000
DEEPSPEED_BUCKET = 500_000_000


def flat_buckets(zero: int, elements: int, ranks: int) -> int:
    """Buckets (collective calls) a flat ZeRO-1 or ZeRO-2 buffer of ``elements`` over ``ranks`` is reduced
    and gathered in (see above)."""
    size = max(MEGATRON_BUCKET, MEGATRON_BUCKET_PER_RANK * ranks) if zero == 1 else DEEPSPEED_BUCKET
    return max(1, -(-elements // size))
