"""Expert-parallel serving (``infer --ep E [--tp T] [--attention-dp D]``): a mixture of experts served on E GPUs,
its routed experts split E ways, its attention (and dense layers) tensor-parallel over T GPUs and data-parallel over
D = E / T groups of them. Pure arithmetic: one GPU's share of each roofline row (tfcalc.count.serving.roofline).

The layout is the published stacks': SGLang's ``--tp E --ep E --enable-dp-attention --dp D`` (lmsys.org/blog/
2025-05-05-large-scale-ep), vLLM's ``--data-parallel-size D --tensor-parallel-size T --enable-expert-parallel``
(EP = T·D: vLLM docs, "Expert Parallel Deployment"), DeepSeek-V3's inference system (arXiv 2412.19437, sec. 3.4:
prefill EP 32 with attention TP 4 × DP 8; decode EP 320 with attention TP 4 × DP 80, or EP 144 on 18 nodes with
32 redundant experts, DeepSeek's "Day 6" inference-system note). With B sequences in flight over the E GPUs:

1. Weights per GPU: attention, dense FFNs, shared experts, the router, embeddings and the LM head as under
   ``--tp T`` (tfcalc.count.serving.serving_tp: Megatron's splits over T, whole on every attention-DP group);
   the routed experts whole, h = (n + R)/E of them on each GPU (n experts, R redundant copies of hot experts,
   DeepSeek's EPLB; E must divide n + R, as every published layout does: 256 + 32 over 144 or 72 GPUs).
2. KV cache per GPU: each attention-DP group holds the state of its own b = ⌈B/D⌉ sequences, split over its T
   GPUs as ``--tp T`` splits it (serving_tp.state_bytes_per_gpu at batch b).
3. A step on one GPU: the attention and dense rows of b sequences under TP T (serving_tp.shard_row), and of the
   routed experts its share of the whole step's: the step's B·q tokens choose k of the n experts each; under
   uniform routing the k·B·q pairs spread evenly over the n + R slots, so one GPU multiplies h/(n + R) of them
   (FLOPs, activations) and reads the weights of those of its h experts some token hits: h·(1 − (1 − k/(n + R))^
   (B·q)) experts a layer (with R = 0, n·(1 − (1 − k/n)^(B·q)) across the model split over E GPUs, the roofline's
   experts_touched; a replica takes its share of its expert's tokens, so each slot's chance is k/(n + R)).
4. All-to-all per MoE layer and step (dispatch and combine): each GPU sends its B·q/E tokens (the T GPUs of an
   attention group dispatch a T-th of its tokens each) to the GPUs holding their experts, and the experts' outputs
   come back. Rows of d_model per token and call, over the network and over NVLink, as
   tfcalc.count.training.experts_parallel.token_routes counts them (``route``): inside one node one copy per
   (token, expert) pair off this GPU, k·(E − 1)/E, over NVLink; across ν nodes the prefill runs DeepEP's normal
   kernels -- once per remote node holding one of the token's experts (node-limited routing: DeepSeek's groups cap
   it at topk_group nodes), forwarded once per GPU over NVLink -- and the decode DeepEP's low-latency kernels, one
   RDMA message per (token, expert) pair, k·(E − r)/E of them across nodes (r GPUs a node; DeepEP docs/legacy.md,
   whose EP 64 dispatch of 128 tokens × top 8 × 7,168 FP8 bytes in 173 µs is 43 GB/s of exactly those bytes).
   Dispatch in the activation dtype (FP8 with one fp32 scale per 128 channels under fp8 weights, as DeepEP
   sends), combine in the activation dtype (bf16). Both links at once; one latency per call (every peer's transfer
   issued at once, not a pairwise ring as training's), the network's when the group spans nodes: 2·L calls a step.
5. The step's compute adds the attention group's TP all-reduces (serving_tp.comm_seconds at batch b over T GPUs)
   and the per-step costs of tfcalc.count.perf.inference at b sequences; the all-to-all follows it, exposed.
   Decode throughput of the E GPUs is B per step; per GPU B/E, per node B·(GPUs per node)/E per step.
6. ``--overlap ep`` (SGLang's two-batch overlap, DeepSeek's dual micro-batch prefill and 5-stage decode, vLLM's
   dual-batch overlap): two halves of ⌈B/2⌉, each reading its weights and launching its kernels again (2 × a step
   at ⌈B/2⌉), one half's all-to-all under the other's compute, stage by stage as SGLang's DeepSeek strategies run
   them (tfcalc.count.serving.ep_overlap). The halves' matmuls run on the SMs the all-to-all leaves them
   (``held_sms``: DeepEP's normal kernels hold 20, its low-latency decode kernels none while their RDMA messages
   fly, profile-data's README; one node's NCCL all-to-all ``comm_sms``): rows × S/(S − h).
7. Expert load imbalance (``--expert-imbalance``): every GPU waits for the one whose experts received the most
   pairs, f times the mean (tfcalc.count.perf.expert_imbalance: the expected maximum over the E GPUs of the step's
   routing noise and a placement skew, EPLB's measured spread by default); that GPU's routed rows are f × step 3's
   (FLOPs, activations, experts hit at f·B·q tokens), its all-to-all's wire time f × step 4's.

Not modelled: the attention groups' unequal lengths (every group at the same context), contention between the
overlapped compute and communication beyond the SMs held (SGLang measures both slower under TBO, no figure).

Worked example (tests/count/serving/test_expert_parallel.py): Qwen3-30B-A3B (48 layers, 128 experts, k 8, d 2048)
at EP 4 (attention DP 4) decoding B = 8 sequences in bf16 on one node: b = 2 sequences per attention group, h = 32
experts per GPU of which 32·(1 − (1 − 8/128)^8) = 12.90 are hit a layer; each GPU dispatches 2 tokens, each
8·3/4 = 6 rows of 2,048 × 2 bytes off the GPU: 24,576 bytes a token each way, 2 · 48 · 2 · 24,576 = 4,718,592
bytes a step, in 2 · 48 · 2 µs + 4,718,592 B / (450 GB/s × 0.8) = 205.1 µs on an H100 node's NVLink. DeepSeek-V3 at
EP 72 over 9 nodes decoding 256 sequences a GPU (SGLang's setup) sends 256 · 58 · 8 · 64/72 rows of 7,392 + 14,336
bytes a step across nodes: 2.29 GB, 51 ms at 50 GB/s × 0.9 -- about what its compute takes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Callable, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.budget import largest_fitting
from tfcalc.count.model.params import param_entries
from tfcalc.count.model.quant import WeightFormat, entry_bytes, stored_format
from tfcalc.count.perf import expert_imbalance
from tfcalc.count.perf.inference import step_seconds
from tfcalc.count.serving import ep_overlap, serving_tp
from tfcalc.count.serving.ep_all_to_all import (  # noqa: F401 - the module's steps 4 and 6, re-exported
    EP_COMMS,
    AllToAll,
    all_to_all,
    allgather_reducescatter,
    comm_method,
    held_sms,
    moe_layers,
    moe_of,
    route,
    slowed,
    step_all_to_all,
)
from tfcalc.count.serving.roofline import (
    Ceilings,
    Row,
    Step,
    decode_step,
    param_component,
    prefill_step,
    weight_bytes_by_component,
)
from tfcalc.count.serving.static import BATCH_LIMIT, Estimate, decode_totals, first_batch, step_overhead
from tfcalc.errors import InputError
from tfcalc.workload import Workload, decoder_source

ROUTED = "expert_ffn"  # the routed experts' matmul components (expert_ffn_gate, _up, _down); shared_expert_ffn: not


@dataclass(frozen=True)
class ExpertLayout:
    """E GPUs: the experts E ways, attention TP T × DP D (T·D = E), R redundant expert copies, and the links."""

    ep: int
    tp: int
    dp: int
    redundant: int = 0
    gpus_per_node: int = 8
    intra: str = "nvlink"
    intra_bytes_per_s: float = 0.0  # per GPU, one direction
    intra_latency_s: float = 0.0
    intra_efficiency: float = 1.0
    network_bytes_per_s: float = 0.0  # per GPU, one direction
    network_latency_s: float = 0.0
    network_efficiency: float = 1.0
    overlap: bool = False  # --overlap ep: two micro-batches, one's all-to-all under the other's compute (step 6)
    imbalance: expert_imbalance.Imbalance = None  # --expert-imbalance: a skew's name or a fixed factor (step 7)
    comm: str = "alltoall"  # --ep-comm, resolved: alltoall (step 4) or allgather (ep_all_to_all.comm_method)

    @property
    def nodes(self) -> int:
        return -(-self.ep // self.gpus_per_node)

    def attention(self) -> Optional[serving_tp.TensorParallel]:
        """The attention group's TP over the node's link (None at T = 1)."""
        if self.tp == 1:
            return None
        return serving_tp.TensorParallel(self.tp, self.intra, self.intra_bytes_per_s, self.intra_latency_s,
                                         self.intra_efficiency)


def check_layout(cfg: ModelConfig, ep: int, tp: int, dp: Optional[int], redundant: int,
                 gpus_per_node: int) -> int:
    """The rule of the module docstring, one line per refusal; the attention DP D (E / T when not given)."""
    for name, v in (("--ep", ep), ("--tp", tp)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{name} must be a positive integer; got {v!r}")
    if isinstance(redundant, bool) or not isinstance(redundant, int) or redundant < 0:
        raise InputError(f"--redundant-experts must be a whole number of expert copies, 0 or more; got {redundant!r}")
    moe = moe_of(cfg)
    if moe is None:
        raise InputError(f"--ep {ep}: {cfg.name} has no mixture of experts to split (use --tp)")
    if cfg.architecture.kind == "encoder-decoder":
        raise InputError("--ep: encoder-decoder mixtures are not modelled; give a decoder-only model")
    if dp is None:
        if ep % tp:
            raise InputError(f"--ep {ep} is not a multiple of --tp {tp}: the attention groups of T GPUs fill the E")
        dp = ep // tp
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise InputError(f"--attention-dp must be a positive integer; got {dp!r}")
    if tp * dp != ep:
        raise InputError(f"--tp {tp} × --attention-dp {dp} = {tp * dp} GPUs, but --ep {ep}: every GPU holds experts "
                         "and serves attention, so T × D must equal E")
    slots = moe.n_expert + redundant
    if ep > slots:
        raise InputError(f"--ep {ep} is more GPUs than {cfg.name}'s {slots} expert slots ({moe.n_expert} experts"
                         + (f" + {redundant} redundant" if redundant else "") + "): a GPU would hold none")
    if slots % ep:
        raise InputError(f"--ep {ep} does not divide {cfg.name}'s {moe.n_expert} experts"
                         + (f" + {redundant} redundant" if redundant else "") + ": each GPU holds as many (give "
                         "--redundant-experts R so that E divides n + R, as DeepSeek's 256 + 32 over 144 GPUs)")
    if ep > gpus_per_node and ep % gpus_per_node:
        raise InputError(f"--ep {ep} across nodes must fill whole nodes of {gpus_per_node} GPUs")
    serving_tp.check_tp(cfg, tp, gpus_per_node)  # the attention group's TP: heads, FFN width, within a node
    return dp


def held(cfg: ModelConfig, lay: ExpertLayout) -> int:
    """Step 1's h: routed experts (slots) on each GPU, (n + R) / E (check_layout: E divides n + R)."""
    return (moe_of(cfg).n_expert + lay.redundant) // lay.ep


def weights_per_gpu(cfg: ModelConfig, fmt: WeightFormat, lay: ExpertLayout, decode: bool = False) -> dict[str, int]:
    """Step 1: {'total', 'routed_experts', 'rest', 'other'} bytes on each GPU; 'other' the weights no
    matmul reads (the roofline's row) under TP T."""
    moe, mxfp4 = moe_of(cfg), stored_format(cfg, fmt)
    routed = rest = 0
    for entry in param_entries(cfg):
        b = entry_bytes(entry, fmt, mxfp4).total
        if (param_component(entry.component, cfg) or "").startswith(ROUTED):
            routed += b
        else:  # serving_tp's share of every other tensor under TP T (the same rule, not a copy)
            rest += serving_tp.entry_bytes_per_gpu(entry, b, cfg, lay.tp)
    mine = routed * held(cfg, lay) // moe.n_expert
    other = serving_tp.weights_per_gpu(cfg, fmt, lay.tp, decode)["other"]
    return {"total": rest + mine, "routed_experts": mine, "rest": rest, "other": other}


def group_batch(batch: int, lay: ExpertLayout) -> int:
    """Step 2's b: the sequences of the fullest attention-DP group."""
    return -(-batch // lay.dp)


def kv_per_gpu(cfg: ModelConfig, w: Workload, lay: ExpertLayout, spare: int = 0) -> int:
    """Step 2: the state of b sequences over the group's T GPUs."""
    return serving_tp.state_bytes_per_gpu(cfg, replace(w, batch=group_batch(w.batch, lay)), lay.tp, spare)


def hit_per_gpu(cfg: ModelConfig, lay: ExpertLayout, tokens: int) -> float:
    """Step 3: of a GPU's h experts, those some of ``tokens`` tokens hit per layer: h·(1 − (1 − k/(n + R))^tokens)."""
    moe = moe_of(cfg)
    return held(cfg, lay) * (1 - (1 - moe.top_k / (moe.n_expert + lay.redundant)) ** tokens)


def _scale(v: int, f: Fraction) -> int:
    return v * f.numerator // f.denominator


IMBALANCE_DEFAULT = "eplb"  # step 7: the published large-EP deployments run DeepSeek's EPLB


def imbalance(cfg: ModelConfig, lay: ExpertLayout, tokens: float) -> float:
    """Step 7's f: the fullest GPU's routed pairs over the mean for a step of ``tokens`` tokens
    (tfcalc.count.perf.expert_imbalance), or the fixed factor --expert-imbalance gives."""
    moe = moe_of(cfg)
    return expert_imbalance.resolve(lay.imbalance, IMBALANCE_DEFAULT, lay.ep, moe.n_expert + lay.redundant,
                                    moe.top_k, tokens)


def expert_row(row: Row, whole: int, cfg: ModelConfig, lay: ExpertLayout, tokens: int) -> Row:
    """Steps 3 and 7: the fullest GPU's share of the whole step's routed-expert row (f times the mean's rows:
    FLOPs, activations, and the experts they hit) when ``tokens`` tokens reach the experts; ``whole`` the row's
    weights, every expert."""
    moe, h, f = moe_of(cfg), held(cfg, lay), imbalance(cfg, lay, tokens)
    pairs = Fraction(h, moe.n_expert + lay.redundant) * Fraction(f).limit_denominator(1 << 20)
    weight = round(whole * hit_per_gpu(cfg, lay, tokens * f) / moe.n_expert)
    return replace(row, flops=_scale(row.flops, pairs), weight_bytes=weight,
                   activation_bytes=_scale(row.activation_bytes, pairs), count=row.count // moe.n_expert * h)


def fullest_all_to_all(a2a: AllToAll, cfg: ModelConfig, lay: ExpertLayout, tokens: float) -> AllToAll:
    """Step 7 on the all-to-all ``a2a`` (the mean GPU's) of a step routing ``tokens`` tokens at once, as the fullest
    GPU receives it: f times the mean's rows in the dispatch, sent back in the combine, so the wire time (not the
    per-call latency) is f times the mean GPU's, f = imbalance(cfg, lay, tokens)."""
    f = imbalance(cfg, lay, tokens)
    if not a2a.seconds or f == 1.0 or a2a.how == "allgather":  # every GPU gets every row: no fullest GPU
        return a2a
    latency = 2 * a2a.layers * (lay.network_latency_s if lay.nodes > 1 else lay.intra_latency_s)
    return replace(a2a, seconds=latency + (a2a.seconds - latency) * f)


class Sharding:
    """One GPU's share of each step (static.estimate's Sharding, for EP): built from the whole step at batch B."""

    def __init__(self, cfg: ModelConfig, fmt: WeightFormat, kv_dtype: str, lay: ExpertLayout,
                 src_seq: Optional[int] = None):
        self.cfg, self.fmt, self.kv_dtype, self.lay, self.src = cfg, fmt, kv_dtype, lay, src_seq
        self.weights = weights_per_gpu(cfg, fmt, lay)["total"]
        self.other = {"decode": weights_per_gpu(cfg, fmt, lay, decode=True)["other"],
                      "prefill": weights_per_gpu(cfg, fmt, lay)["other"]}

    def step(self, whole: Step) -> Step:
        """Step 3 at the whole step's B sequences: the group's b under TP T, the experts' share of B's."""
        cfg, b = self.cfg, group_batch(whole.batch, self.lay)
        if whole.phase == "decode":
            local = decode_step(cfg, b, whole.context, self.fmt, self.kv_dtype, src_seq=self.src)
        else:
            local = prefill_step(cfg, b, whole.queries, self.fmt, self.kv_dtype, src_seq=self.src)
        weights = weight_bytes_by_component(cfg, self.fmt, whole.phase == "decode")
        tokens = whole.batch * whole.queries
        rows = []
        for mine, all_of in zip(local.rows, whole.rows, strict=True):
            if mine.component.startswith(ROUTED):
                rows.append(expert_row(all_of, weights.get(mine.component, 0), cfg, self.lay, tokens))
            elif mine.component == "other":
                rows.append(replace(mine, weight_bytes=self.other[whole.phase]))
            else:
                rows.append(serving_tp.shard_row(mine, cfg, self.lay.tp))
        return replace(local, rows=tuple(rows))


@dataclass(frozen=True)
class Phase:
    """A step's seconds on one GPU: its compute, its all-to-all, and the step (their sum; step 6 under overlap)."""

    compute_s: float
    a2a: AllToAll
    tp_comm_s: float
    step_s: float

    @property
    def exposed_a2a_s(self) -> float:
        return self.step_s - self.compute_s if self.step_s > self.compute_s else 0.0


@dataclass(frozen=True)
class Terms:
    """What estimate() adds beside static.Estimate (the JSON's expert_parallel)."""

    group_batch: int
    experts_per_gpu: int
    weights: dict[str, int]
    prefill: Phase
    decode: Optional[Phase]
    imbalance: dict = None  # step 7: {'prefill': f, 'decode': f or None} at the whole batch's tokens

    @property
    def prefill_a2a(self) -> AllToAll:
        return self.prefill.a2a

    @property
    def decode_a2a(self) -> Optional[AllToAll]:
        return None if self.decode is None else self.decode.a2a


def _parts(cfg, shard: Sharding, whole: Step, fmt, c: Ceilings, src) -> tuple:
    """(the GPU's step, its per-step costs with the TP all-reduces in comm_s, the step's all-to-all)."""
    mine = shard.step(whole)
    a2a = fullest_all_to_all(step_all_to_all(cfg, fmt, shard.lay, whole), cfg, shard.lay, whole.batch * whole.queries)
    copy = route(shard.lay, whole.phase == "decode") != "low_latency"  # DeepEP LL: no copy (perf.moe_serving, 1)
    return mine, step_overhead(cfg, mine, fmt, c, shard.lay.attention(), src, permute=copy), a2a


def _phase(compute_s: float, halves_s: Optional[float], a2a: AllToAll, over, part: Optional[dict] = None,
           decode: bool = False) -> Phase:
    """Step 6 (--overlap ep: SGLang's two-batch overlap, DeepSeek's dual micro-batch; vLLM's DBO): the batch split in
    two, each half's all-to-all under the other's compute, stage by stage (tfcalc.count.serving.ep_overlap; the
    halves' compute ``halves_s``, each half reading the weights again, ``part`` its shares by stage); else the
    all-to-all after the compute."""
    tp = 0.0 if over is None else over.comm_s
    if halves_s is None:
        return Phase(compute_s, a2a, tp, compute_s + a2a.seconds)
    sent = a2a.dispatch_bytes_per_token + a2a.combine_bytes_per_token
    return Phase(halves_s, a2a, tp, ep_overlap.step_seconds(halves_s, part, a2a.seconds, a2a.layers,
                                                            a2a.dispatch_bytes_per_token / sent if sent else 0.5,
                                                            decode))


def _with_a2a(over, phase: Phase):
    """The per-step costs as reported: comm_s the TP all-reduces and the all-to-all's exposed seconds."""
    return None if over is None else replace(over, comm_s=phase.tp_comm_s + phase.exposed_a2a_s)


def estimate(cfg: ModelConfig, w: Workload, fmt: WeightFormat, c: Ceilings, memory_bytes: Optional[int],
             lay: ExpertLayout) -> tuple[Estimate, Terms]:
    """static.estimate's figures on one GPU of the layout, B = w.batch sequences over all E (module docstring)."""
    B, seq, gen, src = w.batch, w.seq, w.gen, decoder_source(cfg, w.seq, w.src_seq)
    shard, half = Sharding(cfg, fmt, w.kv, lay, src), -(-B // 2) if lay.overlap and B > 1 else None
    request = 0.0 if c.perf is None else c.perf.request_s
    prefill, over, a2a = _parts(cfg, shard, prefill_step(cfg, B, seq, fmt, w.kv, src_seq=src), fmt, c, src)
    halves = part = None
    if half:
        h, h_over, _ = _parts(cfg, shard, prefill_step(cfg, half, seq, fmt, w.kv, src_seq=src), fmt, c, src)
        halves, part = 2 * step_seconds(slowed(h.time_s(c), lay, False, c.perf), h_over), ep_overlap.shares(h, c)
    pre = _phase(step_seconds(prefill.time_s(c), over), halves, a2a, over, part)
    prefill_over = _with_a2a(over, pre)
    if prefill_over is not None:  # the request's fixed work, once, before its first token
        prefill_over = replace(prefill_over, request_s=request)
    first = decode_s = per_token = bound = decode_over = dec = None
    if gen > 1:
        def at(batch: int) -> Callable[[int], Step]:
            return lambda context: shard.step(decode_step(cfg, batch, context, fmt, w.kv, src_seq=src))

        n, lo, hi = gen - 1, seq + 1, seq + gen - 1
        first, over, a2a = _parts(cfg, shard, decode_step(cfg, B, lo, fmt, w.kv, src_seq=src), fmt, c, src)
        totals = decode_totals(at(B), lo, hi, c)
        halves = part = None
        if half:
            h, h_over, _ = _parts(cfg, shard, decode_step(cfg, half, lo, fmt, w.kv, src_seq=src), fmt, c, src)
            part = ep_overlap.shares(h, c)
            halves = 2 * step_seconds(slowed(decode_totals(at(half), lo, hi, c).seconds / n, lay, True, c.perf),
                                      h_over)
        dec = _phase(step_seconds(totals.seconds / n, over), halves, a2a, over, part, decode=True)
        decode_s, decode_over = dec.step_s, _with_a2a(over, dec)
        per_token = totals.weight_kv_bytes / B / n
        bound = "compute" if totals.compute_s >= totals.memory_s else "memory"
    kv = kv_per_gpu(cfg, replace(w, src_seq=src), lay)
    est = Estimate(B, seq, gen, prefill, pre.step_s + request, first, decode_s, per_token, bound, shard.weights, kv,
                   None if memory_bytes is None else shard.weights + kv <= memory_bytes, prefill_over, decode_over)
    f = {"prefill": imbalance(cfg, lay, B * seq), "decode": imbalance(cfg, lay, B) if gen > 1 else None}
    return est, Terms(group_batch(B, lay), held(cfg, lay), weights_per_gpu(cfg, fmt, lay), pre, dec, f)


def max_batch(cfg: ModelConfig, w: Workload, fmt: WeightFormat, memory_bytes: int, lay: ExpertLayout) -> int:
    """The largest B whose fullest GPU holds its weights and its group's state: D × the largest group batch."""
    weights, src = weights_per_gpu(cfg, fmt, lay)["total"], decoder_source(cfg, w.seq, w.src_seq)

    def need(b: int) -> int:
        return weights + serving_tp.state_bytes_per_gpu(cfg, replace(w, batch=b, src_seq=src), lay.tp)

    return lay.dp * largest_fitting(need, memory_bytes, BATCH_LIMIT // lay.dp)


def compute_bound_batch(cfg: ModelConfig, w: Workload, fmt: WeightFormat, c: Ceilings, lay: ExpertLayout,
                        weights_only: bool = False) -> Optional[int]:
    """The smallest B whose decode step at context w.seq is compute-bound on one GPU (``weights_only``: its matmuls
    with weights, static.weight_matmuls_compute_bound_batch's rows), or None."""
    src = decoder_source(cfg, w.seq, w.src_seq)
    shard = Sharding(cfg, fmt, w.kv, lay, src)

    def reached(b: int) -> bool:
        rows = [r for r in shard.step(decode_step(cfg, b, w.seq, fmt, w.kv, src_seq=src)).rows
                if not (weights_only and r.mixing)]
        return sum(r.compute_s(c) for r in rows) >= sum(r.memory_s(c) for r in rows)

    return first_batch(reached)
