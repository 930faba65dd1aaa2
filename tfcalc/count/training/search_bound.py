"""A lower bound on the memory of one rank of every layout the plan's search tries of one shape -- its
tensor-, pipeline-, context- and data-parallel degrees (tp, pp, cp, dp) -- so that a search skips the
shapes, and ``--gpus auto`` the GPU counts, that cannot fit, without building a layout. Pure arithmetic.

At one shape the search varies the ZeRO stage, recompute, expert parallelism, HSDP and resharding, the
micro-batch and the schedule (count.training.plan.search, tfcalc.count.training.search_space). It keeps nothing of a
shape whose layout at the first micro-batch under 1F1B does not fit (the least in flight: it then skips
the other schedules and the larger micro-batches), so a bound on those layouts is a bound on all it keeps.
A rank's memory is, over the pipeline stages, the largest of weights + gradients + optimizer states +
activations + ZeRO-3's gathered units (+ FP8 casts and a pipeline's unsharded gradients under ZeRO-3, ≥ 0:
tfcalc.count.training.rank_memory, pipeline_fsdp). For each stage s
that rank_memory prices, at least:

1. activations: the least over the recomputes tried, with 1F1B's min(p − s, m) micro-batches in flight,
   m = global batch / (dp · micro-batch) -- what the old floor left out: a pipeline of p stages keeps up
   to p micro-batches in flight on its first stage until dp grows so large that m < p. Activations
   offloaded: the blocks' stored terms but two blocks' leave the GPU (tfcalc.count.training.offload).
2. gradients and optimizer states: (e_g + e_o) · Ψ₁ / (dp · cp), Ψ₁ the stage's TP-local parameters with
   every routed expert (ep 1). ZeRO-0 and -1 hold more; ZeRO-2 splits the dense states over dp · cp and a
   rank's Ψ₁ₑ/E experts over dp/E ranks (tfcalc.count.training.sharding), Ψ₁ₑ/dp all the same; ZeRO-3 pads each
   tensor up; HSDP splits over fewer ranks. e_o is 0 when the optimizer may be offloaded.
3. weights: the lesser of whole (ZeRO-0 to 2) at the largest expert-parallel degree E tried, e_w · Ψ_E,
   and split (ZeRO-3), e_w · Ψ₁ / (dp · cp) (none under an fp32 reduction: FSDP2's fp32 shard is the master)
   plus the gathered units at E (the smallest units: a routed
   expert's unit shrinks with E); without resharding after forward the stage's weights stay gathered, Ψ_E
   or more.
The bound is the largest over the priced stages of the stage's sum. Activations are read from the one
activation model (tfcalc.count.training.rank_memory's cached stage pricing): the same bytes rank_memory adds.
tests/count/test_search_bound.py checks the bound against rank_memory of every layout the search builds,
and the search with the bound against a plain exhaustive one.
"""

from __future__ import annotations

import functools
import math
from typing import Iterator, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.activations import Activations
from tfcalc.count.training.layout import (
    RECOMPUTE,
    divisors,
    search_ep,
    sequence_parallel_modelled,
)
from tfcalc.count.training.rank_activations import head_parts, layer_bytes
from tfcalc.count.training.rank_memory import (
    gathered_bytes,
    layout_activations,
    optimizer_element_bytes,
    priced_stages,
    weight_element_bytes,
)
from tfcalc.count.training.shard import (
    Tensor,
    module_tensors,
    stage_ranges,
    total_blocks,
    tp_local_shape,
    tp_split_widths,
    unit,
)
from tfcalc.count.training.sharding import check_model_variants, grad_element_bytes, routed_expert
from tfcalc.errors import InputError
from tfcalc.workload import Layout


def is_gpu_count(n: int, gpus_per_node: int) -> bool:
    """Whether ``--gpus auto`` tries n GPUs (tfcalc.count.training.layout.gpu_counts): a power of two below a
    node, or whole nodes."""
    return n % gpus_per_node == 0 if n >= gpus_per_node else n & (n - 1) == 0


class ShapeBound:
    """The module docstring's bound for the layouts one search builds from ``base`` (its first
    micro-batch, dtype, offload and batch): ``fits(tp, pp, cp, dp)`` is False only for shapes none of
    whose layouts fits in ``memory`` bytes."""

    def __init__(self, cfg: ModelConfig, base: Layout, memory: int, gpus_per_node: int,
                 recompute: Optional[str] = None, ep: Optional[int] = None):
        self.cfg, self.base, self.memory, self.gpus_per_node, self.ep = cfg, base, memory, gpus_per_node, ep
        self.recomputes = least_recomputes(cfg, base, recompute)
        self.ew = weight_element_bytes(base.dtype)
        self.eg = grad_element_bytes(base)
        self.eo = 0 if base.offload_optimizer else optimizer_element_bytes(base.dtype)
        if base.optimizer == "muon" and self.eo:  # one moment less on the matrices: a bound, 4 less everywhere
            self.eo -= 4  # the fp32 moment Muon does not keep
        self.sp = sequence_parallel_modelled(cfg)
        self._contexts: dict[tuple, tuple[Activations, Layout]] = {}
        self._parts: dict[tuple, tuple[int, int]] = {}
        self._layers: dict[tuple, int] = {}
        self._stored: dict[tuple, tuple[int, int]] = {}  # the blocks' stored bytes a micro-batch, the largest block's
        self.n_blocks = total_blocks(cfg)
        self._params: dict[tuple, tuple[int, int]] = {}
        self._units: dict[tuple, tuple[int, int]] = {}
        self._fits: dict[tuple[int, int, int, int], bool] = {}

    def eps(self, tp: int, cp: int, dp: int) -> tuple[int, ...]:
        """The expert-parallel degrees the search tries at the shape (count.training.layout.candidate_layouts)."""
        if self.ep is not None:
            return (self.ep,)
        return search_ep(self.cfg, tp, dp, self.gpus_per_node) if cp == 1 else (1,)

    def fits(self, tp: int, pp: int, cp: int, dp: int) -> bool:
        key = (tp, pp, cp, dp)
        if self._unbounded(pp):
            return True
        if key not in self._fits:
            self._fits[key] = self.bytes(tp, pp, cp, dp, stop=self.memory) <= self.memory
        return self._fits[key]

    def _unbounded(self, pp: int) -> bool:
        """Ends counted as blocks by the request (--pp-split-counts) that do not divide over pp stages: the
        search's 1F1B layout of the shape is refused and its interleaved ones are priced as they come, so
        no 1F1B bound holds for them: the shape is not ruled out."""
        counted = len(self.base.pp_split_counts)
        return bool(counted) and pp > 1 and (self.n_blocks + counted) % pp != 0

    def bytes(self, tp: int, pp: int, cp: int, dp: int, stop: Optional[int] = None) -> int:
        """The bound, bytes (the module docstring's steps 1-3); ``stop``: return as soon as a stage's
        exceeds it (the first stage, with the most in flight, is priced first)."""
        cfg, b = self.cfg, self.base
        m = b.global_batch // (dp * b.micro_batch)
        e = max(self.eps(tp, cp, dp))
        gathered = _gathered(cfg, b.dtype, tp, e)
        n = dp * cp
        most = 0
        for s in priced_stages(cfg, pp, 1, self._counted(pp)):
            psi1, experts = self.stage_params(tp, pp, s)
            psie = psi1 - experts + experts // e  # a rank's routed experts split e ways (e divides their count)
            # ZeRO-3 with an fp32 reduction keeps no 16-bit shard (rank_memory.fp32_master_shard): none split
            shard = 0 if self.eg == 4 and self.ew < 4 else self.ew
            states = (self.eg + self.eo) * (psi1 // n) + min(self.ew * psie, shard * (psi1 // n) + gathered)
            most = max(most, states + self.activations(tp, pp, cp, min(m, 2 * pp), s))
            if stop is not None and most > stop:
                break
        return most

    def stage_params(self, tp: int, pp: int, stage: int) -> tuple[int, int]:
        """(Ψ₁, of it the routed experts') of the stage's TP-rank-0 slice at ep 1: its blocks kind by kind and
        its end's tensors -- tfcalc.count.training.rank_memory.param_sums in closed form (a tied embedding on a
        single stage once; tests/count/test_search_bound.py checks them equal)."""
        key = (tp, pp, stage)
        if key not in self._params:
            blocks = self._blocks(pp, stage)
            first, last = stage == 0, stage == pp - 1
            out = [0, 0]
            for stack, block, n in self.cfg.architecture.kinds_in(blocks.start, blocks.stop):
                every, experts = self._unit_params(tp, stack, block)
                out[0] += n * every
                out[1] += n * experts
            ends = ("first",) * first + ("last",) * last + ("both",) * (first or last)
            out[0] += sum(_local(t, tp) for t in module_tensors(self.cfg) if not t.per_block and t.where in ends)
            self._params[key] = (out[0], out[1])
        return self._params[key]

    def _counted(self, pp: int) -> tuple[str, ...]:
        """The ends the search's 1F1B layout of pp stages counts as blocks (the request's, where they divide)."""
        counted = self.base.pp_split_counts if pp > 1 else ()
        return counted if (self.n_blocks + len(counted)) % pp == 0 else ()

    def _blocks(self, pp: int, stage: int) -> range:
        """The stage's blocks under 1F1B (tfcalc.count.training.shard.stage_ranges, V = 1), in closed form."""
        if self._counted(pp):
            return stage_ranges(self.n_blocks, pp, stage, 1, self._counted(pp))[0]
        size, extra = divmod(self.n_blocks, pp)
        start = stage * size + min(stage, extra)
        return range(start, start + size + (stage < extra))

    def _unit_params(self, tp: int, stack, block) -> tuple[int, int]:
        key = (tp, id(block), stack.prefix)
        if key not in self._units:
            tensors = unit(stack, block)
            self._units[key] = (sum(_local(t, tp) for t in tensors),
                                sum(_local(t, tp) for t in tensors if routed_expert(t.name)))
        return self._units[key]

    def activations(self, tp: int, pp: int, cp: int, m: int, stage: int) -> int:
        """Step 1 at one stage of 1F1B: min(p − s, m) micro-batches in flight, each its stage's stored terms,
        plus what is held once (the rebuilt block, the loss gradients): linear in the count."""
        c = min(pp - stage, m)
        if not self.base.offload_activations:
            return min(c * per + once for per, once in (self.stage_parts(tp, pp, cp, r, stage)
                                                         for r in self.recomputes))
        most = []  # offloaded: the blocks' stored terms leave the GPU but two blocks' (tfcalc.count.training.offload)
        for r in self.recomputes:
            per, once = self.stage_parts(tp, pp, cp, r, stage)
            blocks, largest = self._stored[tp, pp, cp, r, stage]
            most.append(c * (per - blocks) + once + min(c * blocks, 2 * largest))
        return min(most)

    def stage_parts(self, tp: int, pp: int, cp: int, recompute: str, stage: int) -> tuple[int, int]:
        """(bytes per micro-batch in flight, bytes held once) of one rank of the stage under 1F1B: the terms
        of tfcalc.count.training.rank_activations.stage_activation_bytes, each kind of block's priced once per
        (tp, cp, recompute) -- c · the first + the second is that function's figure with c in flight
        (tests/count/test_search_bound.py checks every stage)."""
        key = (tp, pp, cp, recompute, stage)
        if key not in self._parts:
            acts, layout = self._context(tp, cp, recompute)
            first, last = stage == 0, stage == pp - 1
            blocks = self._blocks(pp, stage)
            kinds = acts.kinds_in(blocks.start, blocks.stop)
            stored = [(n, self._layer(tp, cp, recompute, terms, x, True)) for terms, n, x in kinds]
            self._stored[key] = (sum(n * b for n, b in stored), max((b for _, b in stored), default=0))
            per = self._stored[key][0] + self._head(tp, cp, recompute, first, last)
            once = max((self._layer(tp, cp, recompute, terms, x, False) for terms, _, x in kinds), default=0) \
                if recompute in ("full", "op") else 0
            once += -(-acts.loss_gradients // tp) if last else 0
            self._parts[key] = (per, once)
        return self._parts[key]

    def _context(self, tp: int, cp: int, recompute: str) -> tuple[Activations, Layout]:
        """One micro-batch's terms, and a layout with what sharing them reads (tp, SP, recompute)."""
        key = (tp, cp, recompute)
        if key not in self._contexts:
            b = self.base
            split = self.sp and tp > 1 and (b.seq // cp) % tp == 0
            layout = Layout(tp=tp, cp=cp, seq=b.seq, global_batch=b.micro_batch, micro_batch=b.micro_batch,
                            recompute=recompute, sequence_parallel=split, dtype=b.dtype, attention=b.attention,
                            dropout=b.dropout)
            self._contexts[key] = (layout_activations(self.cfg, layout), layout)
        return self._contexts[key]

    def _head(self, tp: int, cp: int, recompute: str, first: bool, last: bool) -> int:
        key = (tp, cp, recompute, first, last)
        if key not in self._layers:
            acts, layout = self._context(tp, cp, recompute)
            self._layers[key] = sum(head_parts(acts, layout, first, last))
        return self._layers[key]

    def _layer(self, tp: int, cp: int, recompute: str, terms: dict, x: int, stored: bool) -> int:
        key = (tp, cp, recompute, id(terms), x, stored)  # terms: a dict of the cached Activations, kept alive
        if key not in self._layers:
            acts, layout = self._context(tp, cp, recompute)
            self._layers[key] = layer_bytes(acts, layout, terms, stored=stored, layer_input=x)
        return self._layers[key]

    def gpu_counts(self, cps: tuple[int, ...], lower: int, limit: int) -> Iterator[int]:
        """The GPU counts ``--gpus auto`` tries, fewest first, from ``lower`` to ``limit``, with at least one
        shape whose bound fits (``cps``: the context-parallel degrees the search may take); found window by
        doubling window, so a model that fits on few GPUs prices few shapes."""
        cfg, b = self.cfg, self.base
        if b.global_batch % b.micro_batch:
            return
        dps = divisors(b.global_batch // b.micro_batch)
        blocks = 1 if cfg.arch == "encoder-decoder" else total_blocks(cfg)  # candidate_layouts and check_layout's pp
        tps = _tps(cfg, self.gpus_per_node)
        lo = max(1, lower)
        while lo <= limit:
            hi = min(limit, 2 * lo + self.gpus_per_node)
            found = set()  # pp up to the window's GPUs, not the model's depth (2**40 blocks: no list of them)
            for tp, cp, pp in ((t, c, p) for t in tps for c in cps for p in range(1, min(blocks, hi // (t * c)) + 1)):
                for dp in dps:
                    n = tp * cp * pp * dp
                    if n > hi:
                        break
                    if n >= lo and n not in found and is_gpu_count(n, self.gpus_per_node) \
                            and self.fits(tp, pp, cp, dp):
                        found.add(n)
            yield from sorted(found)
            lo = hi + 1


def _tps(cfg: ModelConfig, gpus_per_node: int) -> list[int]:
    """The tensor-parallel degrees a search takes: within a node, splitting every width evenly."""
    return [t for t in divisors(math.gcd(*(n for _, n in tp_split_widths(cfg)))) if t <= gpus_per_node]


def _local(t: Tensor, tp: int) -> int:
    """Elements of every copy of the tensor on TP rank 0."""
    return t.copies * math.prod(tp_local_shape(t, tp))


def least_recomputes(cfg: ModelConfig, base: Layout, recompute: Optional[str] = None) -> tuple[str, ...]:
    """The recomputes a search tries (the one given, or every one the model takes) less those that never
    hold fewer activations than another tried: selective keeps a subset of what none keeps (the score
    terms dropped), op keeps what full keeps and what its policy saves, and rebuilds the same block
    (tfcalc.count.training.rank_activations.layer_bytes)."""
    tried = [r for r in (RECOMPUTE if recompute is None else (recompute,)) if _allowed(cfg, r, base)]
    drop = {"none" if "selective" in tried else "", "op" if "full" in tried else ""}
    return tuple(r for r in tried if r not in drop)


def _allowed(cfg: ModelConfig, recompute: str, base: Layout) -> bool:
    try:
        check_model_variants(cfg, None, recompute, base.attention)
    except InputError:
        return False
    return True


@functools.lru_cache(maxsize=1024)
def _gathered(cfg: ModelConfig, dtype: str, tp: int, ep: int) -> int:
    """ZeRO-3's gathered units at (tp, ep) (tfcalc.count.training.rank_memory.gathered_bytes)."""
    return gathered_bytes(cfg, Layout(tp=tp, dp=ep, ep=ep, zero=3, seq=1, global_batch=ep, dtype=dtype))
