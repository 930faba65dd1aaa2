"""One training micro-batch's compute time on one rank, matmul by matmul. Pure arithmetic.

Over the description's matmuls (tfcalc.count.model.flops.matmul_entries at the micro-batch and seq: the
blocks' ``linears()`` and their mixers' ``mixing()``, tfcalc.architecture.mixer), each under the layout's
tensor parallelism t (Megatron's split, Narayanan et al. 2021, sec. 2.3; tfcalc.count.training.shard):

- column-parallel (Q, K, V, gate, up, a shared expert's, the vocabulary-parallel LM head): n / t;
- row-parallel (O, down): k / t;
- attention's score products: the heads, count / t; a mixture's experts stay whole (replicated).

A mixture's expert matmuls run as one grouped GEMM per projection, forward and input gradient, at the
efficiency of the routing's uneven rows per expert (tfcalc.count.perf.grouped_gemm: binomial row counts
under a balanced router, each expert's tiles its own); the weight gradient (k, rows) @ (rows, n) at the
mean rows. Under expert parallelism every rank waits for the one whose experts received the most rows: each
expert GEMM × f (``imbalance``: tfcalc.count.perf.expert_imbalance, by default the routing's noise alone, the
router's balancing loss evening the rest over the batch).

Each matmul (m, k) @ (k, n) runs forward as one GEMM and backward as two: the input gradient
(m, n) @ (n, k) and the weight gradient (k, m) @ (m, n), each at its own shape's efficiency
(tfcalc.count.perf.gemm). Attention's score products under a fused kernel ("flash") run at the kernel's
efficiency over the causal pairs it computes (masked blocks skipped), forward and backward (2 × the
forward's FLOPs); under "math" attention as batched GEMMs over the full square, plus the scores'
memory traffic (tfcalc.count.perf.elementwise). Recompute adds a forward: all of it (full) or the score
products (selective). Then the non-matmul traffic at the achievable bandwidth and each kernel's fixed
cost: under kernels="eager" (the default: PyTorch without torch.compile) every op's bytes and kernel
as tfcalc.count.perf.eager derives them, forward, backward and a replayed forward under full or op
recompute; under "fused" one read and one write per element (tfcalc.count.perf.elementwise); under "compile"
(torch.compile of each block, torchtitan's) the blocks' work fused and the embedding, final norm and loss
eager, once each way (tfcalc.count.perf.elementwise, 5), and RoPE in complex numbers (``layout.rope``, torchtitan's)
as the casts and aten product Inductor leaves it (elementwise, 6), replayed with the blocks under recompute. Under
--compute-dtype fp8 the FP8 linears run at the FP8 peak under the FP8 ceiling, and their
casts (16-bit in, FP8 row-major and transposed out) are memory traffic and kernels of their own
(tfcalc.count.perf.fp8_time). A mixture of experts adds its router's top-k, index work and token permutes
(tfcalc.count.perf.moe_dispatch) as memory traffic and kernels, forward, backward and a replayed forward
under full or op recompute (``block_moe_s``, of ``block_other_s``).

Stages: the blocks' time is per block (the mean over the layers), so a stage of n blocks takes n times
it; the last stage adds the LM head, the first the embedding's traffic (in the non-matmul terms).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from tfcalc.config import ModelConfig
from tfcalc.count.model import non_matmul, op_recompute
from tfcalc.count.model.dtypes import BITS_PER_ELEMENT
from tfcalc.count.model.flops import MatmulEntry, matmul_entries
from tfcalc.count.model.memory import activation_element_bytes
from tfcalc.count.perf import eager, elementwise, expert_imbalance, fp8_recipes, gemm, grouped_gemm, moe_dispatch
from tfcalc.count.perf.hardware import PerfSpec
from tfcalc.count.training import mixer_loops
from tfcalc.count.training.context_parallel import kv_elements, ring_merges
from tfcalc.count.training.experts_folded import folded
from tfcalc.count.training.fp8 import gathers_fp8, runs_fp8
from tfcalc.count.training.shard import total_blocks
from tfcalc.count.training.sharding import shard_dp
from tfcalc.workload import Layout

COLUMN = ("q", "k", "v", "gate", "up", "qkv")
ROW = ("o", "down")


@dataclass(frozen=True)
class MicroBatchTime:
    """Seconds of one micro-batch on one rank: per block (mean) and for the LM head, by kind."""

    block_matmul_s: float  # forward + backward + recompute, one block
    head_matmul_s: float
    block_other_s: float  # non-matmul traffic and kernel costs, one block
    head_other_s: float
    block_forward_s: float  # one block's forward alone (matmuls and the rest)
    block_weight_grad_s: float = 0.0  # of block_matmul_s: the weight-gradient GEMMs (zero-bubble's W)
    head_weight_grad_s: float = 0.0
    block_attention_s: float = 0.0  # of block_matmul_s: attention's score products, fwd + bwd (+ recompute)
    block_moe_s: float = 0.0  # of block_other_s: the MoE layers' top-k, index work and permutes (moe_dispatch)

    def stage_s(self, blocks: int, last: bool) -> float:
        return blocks * (self.block_matmul_s + self.block_other_s) + (self.head_matmul_s + self.head_other_s) * last


def tp_shape(e: MatmulEntry, tp: int, n_expert: int = 1, fold: tuple[int, int] = (1, 1)) -> tuple[int, int, int, int]:
    """(m, k, n, count) of one TP rank's share of the matmul (see the module docstring). A mixture's
    routed rows are spread over its n_expert experts (a grouped GEMM of n_expert products of m / E rows,
    uniform routing), whole on every TP rank. ``fold`` (S, T): experts folded over TP × DP
    (tfcalc.count.training.experts_folded, steps 3-4): the rank routes 1/S of the rows (S = tp, its sequence
    shard), its ETP group gathers T ranks' rows and each multiplies them at 1/T of the experts' width."""
    m, k, n = e.shape
    share, etp = fold
    if is_expert(e):
        m = -(-m * etp // share)
        tail = e.component.rsplit("_", 1)[-1]
        k, n = (k, -(-n // etp)) if tail in COLUMN else (-(-k // etp), n) if tail in ROW else (k, n)
        return -(-m // n_expert), k, n, e.count * n_expert
    if e.component.endswith("router") and share > 1:  # the router on the rank's shard (experts_folded, 3)
        return -(-m // share), k, n, e.count
    if tp == 1:
        return m, k, n, e.count
    if e.mixing:
        return m, k, n, max(1, e.count // tp)
    if e.component.endswith("router"):
        return m, k, n, e.count
    tail = e.component.rsplit("_", 1)[-1]
    if e.component == "lm_head" or tail in COLUMN:
        return m, k, max(1, n // tp), e.count
    if tail in ROW:
        return m, max(1, k // tp), n, e.count
    return m, k, n, e.count


def fold(layout: Layout) -> tuple[int, int]:
    """tp_shape's ``fold`` of the layout: (tp, etp) where the experts are folded, else (1, 1)."""
    return (layout.tp, layout.etp) if folded(layout) else (1, 1)


def _gemm_s(m: int, k: int, n: int, count: int, peak: float, perf: PerfSpec) -> float:
    if perf.matmul_efficiency is not None:
        return 2 * m * k * n * count / (peak * perf.matmul_efficiency)
    return gemm.seconds(m, n, k, peak, perf.sm_count, perf.matmul_ceiling, count)


def n_expert(cfg: ModelConfig) -> int:
    """The experts of the (first) mixture of experts, 1 without one."""
    return next((b.ffn.n_expert for _, b, _ in cfg.architecture.kinds() if b.is_moe), 1)


def _entry_s(e: MatmulEntry, layout: Layout, peak: float, perf: PerfSpec, experts: int = 1
             ) -> tuple[float, float, float]:
    """(forward, backward, of the backward the weight gradient) seconds of one copy of the matmul on one
    rank. Context parallelism (tfcalc.count.training.context_parallel): a rank's rows are its s/C positions, its
    causal score pairs 1/C of the whole (load-balanced chunks); the ring's first step runs the causal kernel, its
    C − 1 later steps unmasked blocks of as many pairs each, at the kernel's unmasked forward rate
    (tfcalc.count.perf.hardware, ``flash_unmasked_forward``)."""
    m, k, n, count = tp_shape(e, layout.tp, experts, fold(layout))
    if e.mixing and layout.attention == "flash":
        flops = e.causal_total / e.copies / layout.tp / layout.cp
        fwd_eff, bwd_eff = (perf.matmul_efficiency,) * 2 if perf.matmul_efficiency else perf.flash_efficiency
        forward = flops / (peak * fwd_eff)
        if layout.cp > 1 and not perf.matmul_efficiency and perf.flash_unmasked_forward:
            C = layout.cp
            forward = flops / C / (peak * fwd_eff) + flops * (C - 1) / C / (peak * perf.flash_unmasked_forward)
        return forward, 2 * flops / (peak * bwd_eff), 0.0
    m = -(-m // layout.cp)
    forward = _gemm_s(m, k, n, count, peak, perf)
    weight_grad = _gemm_s(k, m, n, count, peak, perf) if not e.mixing else 0.0
    backward = _gemm_s(m, n, k, count, peak, perf) + (weight_grad if not e.mixing
                                                      else _gemm_s(k, m, n, count, peak, perf))
    if is_expert(e) and perf.matmul_efficiency is None:  # the routing's uneven rows per expert (grouped_gemm)
        forward = grouped_gemm.seconds(m * count, count, n, k, peak, perf.sm_count, perf.matmul_ceiling)
        backward = grouped_gemm.seconds(m * count, count, k, n, peak, perf.sm_count, perf.matmul_ceiling) \
            + weight_grad
    return forward, backward, weight_grad


IMBALANCE_DEFAULT = "uniform"  # the router's balancing loss over the batch: its noise alone (expert_imbalance)


def imbalance(cfg: ModelConfig, layout: Layout) -> float:
    """The fullest EP rank's routed rows over the mean (tfcalc.count.perf.expert_imbalance) for one micro-batch:
    the EP group's ep ranks route micro_batch · seq / cp tokens each; 1.0 without expert parallelism."""
    moe = next((b.ffn for _, b, _ in cfg.architecture.kinds() if b.is_moe), None)
    if moe is None or layout.ep <= 1:
        return 1.0
    tokens = layout.micro_batch * layout.seq * layout.ep / layout.cp
    return expert_imbalance.resolve(layout.expert_imbalance, IMBALANCE_DEFAULT, layout.ep, moe.n_expert, moe.top_k,
                                    tokens)


def is_expert(e: MatmulEntry) -> bool:
    """A mixture's routed expert matmul (its rows a grouped GEMM's, per expert)."""
    return e.component.startswith(("expert_", "encoder_expert_"))


@lru_cache(maxsize=4096)
def micro_batch_time(cfg: ModelConfig, layout: Layout, peak: float, bandwidth: float, perf: PerfSpec,
                     fp8_peak: float = 0.0) -> MicroBatchTime:
    """The module docstring's sum for one micro-batch (layout's tp, sp, micro-batch, seq, recompute,
    attention kernel); ``bandwidth`` the achievable bytes/s; ``fp8_peak`` the FP8 rate the linears run at
    under --compute-dtype fp8 (tfcalc.count.training.fp8)."""
    blocks = total_blocks(cfg)
    entries = matmul_entries(cfg, layout.micro_batch, layout.seq)
    block_mm = head_mm = block_fwd = block_w = head_w = block_attn = 0.0
    kernels = 0
    score_elements = 0
    experts = n_expert(cfg) // layout.ep  # a rank's experts under expert parallelism, each with ep × the rows
    act = activation_element_bytes(layout.dtype)
    fp8_perf = replace(perf, matmul_ceiling=perf.fp8_ceiling * fp8_recipes.gemm_share(layout.fp8_recipe)) \
        if fp8_peak else perf
    cast_fwd = cast_bwd = 0.0
    cast_kernels = [0, 0]  # forward, backward (fp8_recipes)
    wait = imbalance(cfg, layout)  # every EP rank waits for the fullest one's expert GEMMs
    fp8_shards = shard_dp(layout) if gathers_fp8(layout) else 0  # --fp8-all-gather (fp8, step 4)
    for e in entries:
        # --compute-dtype fp8: the blocks' linears at the FP8 peak and ceiling, and their casts (fp8_time)
        fp8 = bool(fp8_peak) and runs_fp8(layout, e.component, e.group, e.mixing)
        fwd, bwd, wgrad = _entry_s(e, layout, fp8_peak if fp8 else peak, fp8_perf if fp8 else perf, experts)
        if fp8:
            m, k, n, count = tp_shape(e, layout.tp, experts, fold(layout))
            c = fp8_recipes.casts(layout.fp8_recipe, -(-m // layout.cp), k, n, act, BITS_PER_ELEMENT[layout.dtype] // 8,
                                  layout.kernels != "eager", fp8_shards, layout.reshard_after_forward)
            cast_fwd += c.forward_bytes * count * e.copies
            cast_bwd += c.backward_bytes * count * e.copies
            cast_kernels = [cast_kernels[0] + c.forward_kernels * e.copies,
                            cast_kernels[1] + c.backward_kernels * e.copies]
            if not fp8_recipes.fp8_weight_grad(layout.fp8_recipe):  # the weight gradient at the 16-bit rate
                high = _entry_s(e, layout, peak, perf, experts)[2]
                bwd, wgrad = bwd - wgrad + high, high
        if wait != 1.0 and is_expert(e):  # the fullest rank's rows: f × the mean's, each GEMM
            fwd, bwd, wgrad = fwd * wait, bwd * wait, wgrad * wait
        again = fwd if (layout.recompute == "full" or (layout.recompute == "selective" and e.mixing)
                        or (layout.recompute == "op" and e.component in op_recompute.RECOMPUTED)) else 0
        total = (fwd + bwd + again) * e.copies
        if e.group in ("lm_head", "pooler"):
            head_mm += total
            head_w += wgrad * e.copies
        else:
            block_mm += total
            block_fwd += fwd * e.copies
            block_w += wgrad * e.copies
            block_attn += total if e.mixing else 0.0
        kernels += e.copies
        if e.mixing and e.component.endswith("qk"):
            score_elements += e.shape[0] * e.shape[2] * max(1, e.count // layout.tp) * e.copies
    again = layout.recompute in ("full", "op")  # op recomputes every non-matmul op too (count.model.op_recompute)
    if layout.kernels == "eager":
        traffic, other, forward_kernels = _eager_other(cfg, layout, act, score_elements, kernels, again, bandwidth,
                                                       perf)
    else:
        compiled = layout.kernels == "compile"  # the blocks fused, the rest eager (elementwise, step 5)
        # a mixer's loop under autograd moves its scan's bytes (mixer_loops, below): its entry's, not twice
        nm = mixer_loops.in_training(cfg, non_matmul.non_matmul_entries(cfg, layout.micro_batch, layout.seq))
        traffic = elementwise.forward_traffic(nm, act, layout.tp, layout.sequence_parallel, compiled) / layout.cp
        if layout.attention == "math":
            traffic += elementwise.score_traffic(score_elements, act, layout.dropout)
        kernels += sum(e.copies for e in nm if not (compiled and elementwise.is_outside_blocks(e)))
        passes = 1 + elementwise.BACKWARD_TRAFFIC + again
        other = (traffic * passes / bandwidth + kernels * perf.kernel_s * (1 + elementwise.BACKWARD_KERNELS + again))
        forward_kernels = kernels
        if compiled:  # once forward and once back: activation checkpointing wraps the blocks only
            fwd, bwd, fwd_k, bwd_k = eager.rank_traffic(cfg, layout.micro_batch, layout.seq, act, layout.tp,
                                                        layout.sequence_parallel, edges_only=True)
            traffic += fwd / layout.cp
            other += (fwd + bwd) / layout.cp / bandwidth + (fwd_k + bwd_k) * perf.kernel_s
            forward_kernels += fwd_k
            if layout.rope == "complex":  # torchtitan's complex RoPE: Inductor's fallback (elementwise, 6)
                c_f, c_b, c_fk, c_bk = elementwise.complex_rope_extra(nm, act, layout.tp)
                traffic += c_f / layout.cp
                other += (c_f * (1 + again) + c_b) / layout.cp / bandwidth + (c_fk * (1 + again) + c_bk) * perf.kernel_s
                forward_kernels += c_fk
    # context parallelism's ring: the block merges and the gradients' fp32 accumulation (context_parallel, 5)
    ring_f, ring_b, ring_fk, ring_bk = ring_merges(entries, layout, kv_elements(cfg, layout) if layout.cp > 1 else 0)
    full = layout.recompute == "full"  # recompute casts the forward's inputs again
    rerun = layout.recompute in ("full", "selective")  # ... and runs attention, so the ring's merges, again
    other += (ring_f * (1 + rerun) + ring_b) / bandwidth + (ring_fk * (1 + rerun) + ring_bk) * perf.kernel_s
    traffic += ring_f
    forward_kernels += ring_fk
    other += ((cast_fwd * (1 + full) + cast_bwd) / bandwidth
              + (cast_kernels[0] * (1 + full) + cast_kernels[1]) * perf.kernel_s)
    forward_kernels += cast_kernels[0]
    forward_other = (traffic + cast_fwd) / bandwidth + forward_kernels * perf.kernel_s
    # a mixer's position loop under autograd (Mamba-1's): its kernels and fp32 passes (mixer_loops)
    lf, lb, lkf, lkb = mixer_loops.loop_costs(cfg, layout.micro_batch, layout.seq, layout.tp)
    other += (lf * (1 + again) + lb) / bandwidth + (lkf * (1 + again) + lkb) * perf.kernel_s
    forward_other += lf / bandwidth + lkf * perf.kernel_s
    d = moe_layers(cfg, layout, act)
    moe_s = _dispatch_s(d, again, bandwidth, perf)
    forward_other += d.forward_bytes / bandwidth + d.forward_kernels * perf.kernel_s
    return MicroBatchTime(block_mm / blocks, head_mm, (other + moe_s) / blocks, 0.0,
                          (block_fwd + forward_other) / blocks, block_w / blocks, head_w, block_attn / blocks,
                          moe_s / blocks)


def moe_layers(cfg: ModelConfig, layout: Layout, act: int) -> moe_dispatch.Dispatch:
    """Every MoE layer's dispatch work (tfcalc.count.perf.moe_dispatch) for one micro-batch on one rank: its
    tokens are the micro-batch's, 1/C of them under context parallelism; TP ranks each route all of them,
    or their sequence shard where the experts are folded (tfcalc.count.training.experts_folded, step 3)."""
    tokens = -(-layout.micro_batch * layout.seq // layout.cp) // fold(layout)[0]
    out = moe_dispatch.Dispatch(0.0, 0.0, 0, 0)
    for _, block, layers in cfg.architecture.kinds():
        if block.is_moe:
            out = out + moe_dispatch.layer(block.ffn, tokens, act, layout.kernels, layout.ep).scaled(layers)
    return out


def _eager_other(cfg: ModelConfig, layout: Layout, act: int, score_elements: int, matmul_kernels: int, again: bool,
                 bandwidth: float, perf: PerfSpec) -> tuple[float, float, int]:
    """kernels="eager": the non-matmul ops as eager PyTorch runs them, each its own kernel (tfcalc.count.perf.eager),
    forward, backward and (full or op recompute) the blocks' forward again -- activation checkpointing wraps the
    blocks (torchtitan's checkpoint_wrapper per TransformerBlock, Megatron-LM's per layer), so the embedding, final
    norm and loss (eager.terms' ``edges_only``) run once; the "math" scores' passes as fused.
    (forward bytes, seconds of the non-matmul work and every kernel's fixed cost, forward kernels)."""
    fwd, bwd, fwd_k, bwd_k = eager.rank_traffic(cfg, layout.micro_batch, layout.seq, act, layout.tp,
                                                layout.sequence_parallel)
    edge_f, _, edge_k, _ = eager.rank_traffic(cfg, layout.micro_batch, layout.seq, act, layout.tp,
                                              layout.sequence_parallel, edges_only=True) if again else (0.0, 0.0, 0, 0)
    fwd, bwd, edge_f = fwd / layout.cp, bwd / layout.cp, edge_f / layout.cp
    if layout.attention == "math":
        scores = elementwise.score_traffic(score_elements, act, layout.dropout)
        fwd, bwd = fwd + scores, bwd + scores * elementwise.BACKWARD_TRAFFIC
    matmul_passes = 1 + elementwise.BACKWARD_KERNELS + again
    kernels = matmul_kernels * matmul_passes + fwd_k * (1 + again) - edge_k + bwd_k
    return fwd, (fwd * (1 + again) - edge_f + bwd) / bandwidth + kernels * perf.kernel_s, matmul_kernels + fwd_k


def moe_step_s(cfg: ModelConfig, layout: Layout, bandwidth: float, perf: PerfSpec) -> float:
    """One rank's MoE dispatch seconds in a step (the micro-batches' ``block_moe_s``, its stage's share of the
    MoE layers: 1/pp of them): part of the compute, shown apart (plan's step table and --json)."""
    d = moe_layers(cfg, layout, activation_element_bytes(layout.dtype))
    return layout.micro_batches * _dispatch_s(d, layout.recompute in ("full", "op"), bandwidth, perf) / layout.pp


def _dispatch_s(d: moe_dispatch.Dispatch, again: bool, bandwidth: float, perf: PerfSpec) -> float:
    """Forward, backward and (full or op recompute) the forward again, at the bandwidth and each kernel's cost."""
    return ((d.forward_bytes * (1 + again) + d.backward_bytes) / bandwidth
            + (d.forward_kernels * (1 + again) + d.backward_kernels) * perf.kernel_s)
