"""Pipeline schedules, and what overlaps with what: pure arithmetic on a Layout (p stages, m micro-batches
a step per DP rank, V virtual stages) and the seconds the performance model gives.

Schedules (``--schedule``; all flush the pipeline every step, so the optimizer sees one synchronous step):

1. 1f1b -- PipeDream-Flush (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
   Clusters Using Megatron-LM", SC21, sec. 2.2.1): bubble (p − 1)/(m + p − 1) of the step (the idle
   (p − 1)·(t_f + t_b) beside m·(t_f + t_b) of work); rank i keeps min(p − i, m) micro-batches'
   activations in flight; per micro-batch it sends its output forward (but the last) and its input
   gradient backward (but the first).
2. interleaved -- the same paper, sec. 2.2.2: each rank holds V chunks of L/(p·V) blocks (chunk v of rank
   i is model chunk v·p + i: tfcalc.count.training.shard.stage_ranges); a micro-batch crosses every rank V times,
   so the bubble shrinks V-fold: t_pb = (p − 1)/V · (t_f + t_b), i.e. ((p − 1)/V)/(m + (p − 1)/V) of the
   step -- and every chunk boundary is a send: rank i sends 2V − [i = p − 1] − [i = 0] activations per
   micro-batch, V times 1F1B's (the paper: "the amount of communication also increases by V").
   Megatron's rules, checked by tfcalc.count.training.layout_pipeline: V ≥ 2, L divisible by p·V, m a multiple
   of p. With --pp-split-counts the embedding and/or the head count as a block each (L + 1 or L + 2
   divisible by p·V; tfcalc.count.training.shard.stage_ranges): the chunks stay equal in "layers", so the bubble,
   the in-flight counts and the sends (every chunk boundary, an embedding-only chunk's output too) are
   as above; the stages' blocks move (the slowest stage's time: tfcalc.count.training.steptime).
   Activations in flight (more than 1F1B's): before its first backward, rank i runs
   2(p − i − 1) + (V − 1)·p warm-up chunk forwards, and one more in the steady state (Megatron-LM,
   megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving; the same
   count in torch.distributed.pipelining's ScheduleInterleaved1F1B), forward order cycling the chunks in
   groups of p micro-batches: rank 0 then holds (V + 1)·p − 1 chunk-micro-batches, p + (p − 1)/V
   micro-batches' worth of its blocks against 1F1B's p -- the factor 1 + (p − 1)/(p·V) of Korthikanti et
   al. 2022, "Reducing Activation Recomputation in Large Transformer Models", sec. 4.2.3.
3. zero-bubble -- ZB-H1 of Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv
   2401.10241, sec. 2.1): the backward pass split into B (the inputs' gradients) and W (the weights'),
   W deferred to fill the drain; the bubble becomes (p − 1)·(T_F + T_B − T_W) against 1F1B's
   (p − 1)·(T_F + T_B + T_W) -- a third of it when the three are equal -- with 1F1B's peak activation
   memory and sends. T_F, T_B, T_W come from the performance model's GEMMs of one micro-batch
   (tfcalc.count.training.micro_batch_time: each weight's gradient GEMM is W, the input-gradient GEMMs, attention's
   backward and recompute are B). ZB-H2 (no bubble, up to 2p − 1 micro-batches in flight) and ZB-V are
   not modelled.
4. dualpipe -- DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv 2412.19437, sec. 3.2.1, Table 2):
   micro-batches fed from both ends of the pipeline, rank i holding stages i and p − 1 − i (two copies of
   the model across the p ranks: 2× the parameters of a rank, with their gradients and optimizer states --
   tfcalc.count.training.rank_memory), one micro-batch's forward and another's backward overlapped. Table 2,
   with B the whole backward of a chunk (input and weight gradients) and F&B an overlapped forward and
   backward pair: bubble (p/2 − 1)·(F&B + B − 3W) against 1F1B's (p − 1)·(F + B) and ZB1P's
   (p − 1)·(F + B − 2W); activations of p + 1 micro-batches a rank against 1F1B's p. The overlap hides
   communication, not compute, so F&B = F + B here; in this module's B (the input gradients alone,
   zero-bubble's) the bubble is (p/2 − 1)·(F + 2B − W), over m·(F + B + W) of work -- each micro-batch
   crosses each rank once, as in 1F1B. It needs p even (the stages pair up) and m even and at least 2p:
   the reference code (deepseek-ai/DualPipe, dualpipe/dualpipe.py, DualPipe.step: "num_ranks % 2 == 0",
   "num_chunks % 2 == 0 and num_chunks >= num_ranks * 2") feeds half the micro-batches from each end, each
   half at least p to fill its warm-up. Every rank is priced with Table 2's p + 1, and sends as 1F1B's. The
   all-to-all overlap is ``--overlap ep``'s.
5. dualpipev -- DualPipeV, DualPipe "cut in half" (Sea AI Lab's "Cut-in-half" schedule; deepseek-ai/DualPipe,
   README's table and dualpipe/dualpipev.py; PyTorch's torch.distributed.pipelining.ScheduleDualPipeV, 2.11
   and later): the model cut into 2p stages of L/(2p) blocks placed in a V, rank i holding stages i and
   2p − 1 − i (the first rank holds the embedding and the head), ONE copy of the parameters (the README's
   "2×" is per stage of 2p: a rank's L/p blocks, 1F1B's). The README's table, per stage (a chunk):
   bubble (PP/2 − 1)(F&B + B − 3W) with PP = 2p stages, i.e. (p − 1)(F_c + 2B_c − W_c) in this module's B;
   a chunk is half the rank, so (p − 1)/2 · (F + 2B − W) in the rank's F, B, W -- over m·(F + B + W) of
   work. Activations of PP + 1 = 2p + 1 chunk-micro-batches: ScheduleDualPipeV's order (steps 1-4 of
   _calculate_single_rank_operations: 2(p − i − 1) forwards of stage i, then i + 1 of each stage, then
   the first overlapped forward) holds 2p − i micro-batches of stage i and i + 1 of stage 2p − 1 − i at its
   peak (at most m of each). Sends: each stage boundary but the fold's (stages p − 1 and p, both on rank
   p − 1), each way: 4 − 2[i = 0] − 2[i = p − 1] a micro-batch. No tied-embedding all-reduce (both ends
   on rank 0). It needs m ≥ 2p (torch: "at least as many microbatches as stages"; DualPipeV.step's
   "num_chunks >= num_ranks * 2"), any p > 1.

Overlap (``--overlap``, any of tp, pp and ep; none by default, Megatron-LM's default):

- pp: sends and receives of the steady state run while the next micro-batch computes (Megatron-LM's
  --overlap-p2p-communication; torch.distributed.pipelining posts isend/irecv asynchronously). Hidden:
  the steady state's transfers. Not hidden: the fill and the drain, where nothing else runs -- the first
  micro-batch's forward crosses p·V − 1 chunk boundaries one after another, the last one's backward as
  many: 2(p·V − 1) transfers of one micro-batch's activations (at most every send of the rank).
  Without it every send of the rank is on the critical path.
- tp: the blocks' tensor-parallel all-gathers and reduce-scatters (tp_activations) run under the GEMMs
  that consume or produce them, cut in chunks (Megatron-LM's --tp-comm-overlap, Transformer Engine's
  userbuffers; PyTorch's async TP, torchtitan's enable_async_tensor_parallel). Both require sequence
  parallelism (Megatron asserts it), as tfcalc does. Hidden: up to the matmul time of each micro-batch.
  Not hidden: the loss's all-reduce (tp_loss), the norms' gradient all-reduce (tp_norm_grads), and
  whatever exceeds the matmuls. Without it every TP collective is on the critical path.
- cp: context parallelism's ring passes overlap with attention (tfcalc.count.training.context_parallel, step 3):
  exposed only where a ring step's K/V take longer than the attention kernel's block -- but under --kernels
  compile torchtitan's torch.compile traces the ring and each transfer is waited for where it is issued (step 7):
  all exposed, unless --overlap cp states them hidden (Inductor's reorder_for_compute_comm_overlap). Without
  --kernels compile the ring is always overlapped, with or without the flag.
- ep: expert parallelism's all-to-alls under another micro-batch's compute (DualPipe; Megatron-Core's
  --overlap-moe-expert-parallel-comm): tfcalc.count.training.experts_parallel, step 4.
TP, CP and exposed PP time sit inside each micro-batch, so the pipeline stretches them as it does the
compute: × (the pipelined step / the compute).
"""

from __future__ import annotations

from tfcalc.workload import Layout

SCHEDULES = ("1f1b", "interleaved", "zero-bubble", "dualpipe", "dualpipev")
OVERLAPS = ("tp", "pp", "ep", "cp")
OVERLAPPED_TP = ("tp_activations",)  # the causes --overlap tp hides (see the module docstring)


def bubble_fraction(layout: Layout, forward_s: float = 1.0, input_grad_s: float = 1.0,
                    weight_grad_s: float = 1.0) -> float:
    """The idle share of the pipelined step (steps 1-5); the seconds of one micro-batch's F, B (input
    gradients) and W on the slowest stage matter only for zero-bubble, dualpipe and dualpipev."""
    p, m, v = layout.pp, layout.micro_batches, layout.virtual_stages
    if p == 1:
        return 0.0
    if layout.schedule == "interleaved":
        idle = (p - 1) / v
        return idle / (m + idle)
    if layout.schedule == "zero-bubble":
        work = forward_s + input_grad_s + weight_grad_s
        idle = (p - 1) * max(0.0, forward_s + input_grad_s - weight_grad_s)
        return idle / (m * work + idle) if work > 0 else 0.0
    if layout.schedule == "dualpipe":  # step 4: Table 2's (p/2 − 1)(F&B + B − 3W), F&B = F + B, B = B + W here
        work = forward_s + input_grad_s + weight_grad_s
        idle = (p // 2 - 1) * max(0.0, forward_s + 2 * input_grad_s - weight_grad_s)
        return idle / (m * work + idle) if work > 0 else 0.0
    if layout.schedule == "dualpipev":  # step 5: the same per chunk of half a rank, over 2p stages
        work = forward_s + input_grad_s + weight_grad_s
        idle = (p - 1) / 2 * max(0.0, forward_s + 2 * input_grad_s - weight_grad_s)
        return idle / (m * work + idle) if work > 0 else 0.0
    return (p - 1) / (m + p - 1)


def stages_held(layout: Layout, stage: int) -> tuple[int, ...]:
    """The pipeline stages whose parameters the rank of ``stage`` holds: its own, and under dualpipe the
    mirrored stage p − 1 − i too (step 4)."""
    if layout.schedule == "dualpipe" and layout.pp > 1:
        return (stage, layout.pp - 1 - stage)
    return (stage,)


def head_stage(layout: Layout) -> int:
    """The pipeline rank that holds the head (and the loss): the last, but the first under dualpipev (step 5)."""
    return 0 if layout.schedule == "dualpipev" else layout.pp - 1


def chunk_micro_batches(layout: Layout, stage: int) -> list[int]:
    """Micro-batches whose activations each of the rank's V chunks holds at the peak (step 2; 1F1B and
    zero-bubble: one chunk, min(p − i, m); dualpipe: min(p + 1, m), step 4; dualpipev: its two stages',
    step 5)."""
    p, m, v = layout.pp, layout.micro_batches, layout.virtual_stages
    if layout.schedule == "dualpipe" and p > 1:
        return [min(p + 1, m)]
    if layout.schedule == "dualpipev":
        return [min(2 * p - stage, m), min(stage + 1, m)]
    if layout.schedule != "interleaved" or v == 1:
        return [min(p - stage, m)]
    n = min(m * v, 2 * (p - stage - 1) + (v - 1) * p + 1)
    counts = [0] * v
    groups, rest = divmod(n, p)
    for g in range(groups):
        counts[g % v] += p
    counts[groups % v] += rest
    return counts


def sends_per_micro_batch(layout: Layout, stage: int) -> int:
    """Activations the rank of ``stage`` sends per micro-batch, forward and backward (steps 1-2, 5)."""
    if layout.pp == 1:
        return 0
    if layout.schedule == "dualpipev":  # step 5: two stages a rank, no send across the fold nor past the ends
        return 4 - 2 * (stage == 0) - 2 * (stage == layout.pp - 1)
    v = layout.virtual_stages if layout.schedule == "interleaved" else 1
    return 2 * v - (stage == layout.pp - 1) - (stage == 0)


def exposed_pp(pp_s: float, layout: Layout, stage: int) -> float:
    """Seconds of the rank's sends on the critical path (the module docstring's pp)."""
    if "pp" not in layout.overlap:
        return pp_s
    sends = layout.micro_batches * sends_per_micro_batch(layout, stage)
    if not sends:
        return 0.0
    v = layout.virtual_stages if layout.schedule == "interleaved" else 1
    crossings = 4 * (layout.pp - 1) if layout.schedule == "dualpipev" else 2 * (layout.pp * v - 1)  # step 5
    return pp_s * min(1.0, crossings / sends)


def exposed_tp(tp_by_cause: dict[str, float], matmul_s: float, layout: Layout) -> float:
    """Seconds of TP collectives on the critical path, before the pipeline's stretch (the module
    docstring's tp); ``matmul_s``: the step's matmul seconds on the rank."""
    total = sum(tp_by_cause.values())
    if "tp" not in layout.overlap:
        return total
    hidden = sum(s for cause, s in tp_by_cause.items() if cause in OVERLAPPED_TP)
    return total - hidden + max(0.0, hidden - matmul_s)
