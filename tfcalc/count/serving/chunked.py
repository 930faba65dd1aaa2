"""Chunked prefill (Agrawal et al. 2024, "Taming Throughput-Latency Tradeoff in LLM Inference with
Sarathi-Serve", OSDI, sec. 4.1-4.2): every engine step runs one decode token for each of the n sequences
in flight and, in the rest of a budget of B tokens, a chunk of a waiting prompt, so that the step reads
the weights once for both. vLLM's V1 engine schedules so by default ("In vLLM V1, chunked prefill is
always enabled by default", docs/configuration/optimization.md, "Chunked Prefill"; the running requests'
decode tokens first, then waiting prompts in the budget left, vllm/v1/core/sched/scheduler.py), with
B = max_num_batched_tokens: 8,192 for the OpenAI server on a GPU of 70 GiB or more, 2,048 below
(vllm/engine/arg_utils.py, EngineArgs._set_default_args). Pure arithmetic on the serving roofline.

A mixed step of n decode tokens at context L and a chunk of c prompt tokens at positions [s, s + c):
1. Its rows: the decode step's (tfcalc.count.serving.roofline.decode_step) and the chunk's (the c queries
   attending to their s + c positions, causal pairs counted by tfcalc.architecture.attention.causal_pairs,
   the cache's s positions read once; the logits of one position). Each matmul with weights is one GEMM of
   n + c rows: FLOPs and activations add, its weights are read once (a MoE's experts: those the n + c tokens
   touch, E·(1 − (1 − k/E)^(n + c)) under uniform routing, as roofline prices a step's). The
   position-mixing rows stay apart (the decode tokens read their caches, the chunk its own).
2. Its seconds: the rows' roofline (the slower of FLOPs and bytes, per row) plus the performance model's
   per-step costs (tfcalc.count.perf.inference.overhead): kernels, dequantization and the host once, the
   elementwise traffic of both parts; under --tp each collective once over both parts' tokens.
3. A prompt of I tokens is split into chunks of C = min(I, B − n) (the budget the decode tokens leave), the
   last one shorter. Its cost on the GPU is what its chunks add to the steps they ride on,
   t_p(n) = Σ_j (T(n, chunk_j) − τ(n)), where τ(n) is the decode step alone; at n = 0 a chunk runs alone
   and pays the weights: t_p(0) = Σ_j T(0, chunk_j). Between whole n, linear (n < 1: between 0 and 1).

   The decode batch is not constant at N: it wanders as sequences join (their last chunk done) and leave (their
   last token), and a GEMM's rows are padded to whole tiles and its tiles to whole waves over the SMs
   (tfcalc.count.perf.gemm, steps 2-3), so T(n, chunk) − τ(n) jumps with n -- nearly nought where the chunk's rows
   fill the decode GEMM's last wave, a whole wave's time where they open one. A prompt's cost is the mean over
   where n falls: t_p(n) is averaged over SAMPLES = 8 batches evenly over about n ± s/2, s = min(n, SPREAD), SPREAD =
   1,024 rows, four of gemm.TILES' tallest tile (the wave pattern of Llama 3 70B's FFN GEMM, 224 tiles a 256-row
   band over 132 SMs, repeats only every 33 bands; over 1,024 rows the mean of eight is within 1 % of the mean
   over 1,500) (``ChunkedPrefill.expected``). At one whole n a prompt could cost less than its FLOPs at the
   ceiling: Llama 3 70B FP8 on one H200, 128 in and out, 0.8 ms at N = 2,305 where its 18 TFLOP take 12 ms,
   the capacity 1.83× TensorRT-LLM's published maximum, above the compute ceiling.
4. The budget carries B − n prompt tokens a step: the steps' prompt room is a server that a prompt holds for
   S(n) = min(n, 1)·τ(n)·I / (B − n) + t_p(n), busy R·S(n) < 1 of the time (capacity: the limit 'budget').

With n = 0 and I ≤ B that is one step over the whole prompt: the unchunked prefill's rows, less the encoder
(decoder-only models only: an encoder-decoder is served unchunked, its prompt through the encoder first).

Whole prompts in the budget (``split=False``, ``--context-chunking off``): TensorRT-LLM's in-flight batching without
chunked context -- its executor's default (ExecutorConfig(enableChunkedContext = false),
cpp/include/tensorrt_llm/executor/executor.h; the Triton backend's enable_chunked_context parameter, false unless
set) with max_num_tokens B = 8,192, trtllm-build's default (BuildConfig.max_num_tokens). Its micro-batch scheduler
(cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp, operator()) walks the requests in order: one token for each
sequence decoding, then each waiting prompt whole while the step's tokens stay within B, and stops at the first that
does not fit. A prompt is then one chunk (step 3: t_p(n) = T(n, I) − τ(n), in one step), a step carries
⌊(B − n)/I⌋ of them, and S(n) = min(n, 1)·τ(n) / ⌊(B − n)/I⌋ + t_p(n): each holds its share of a step's room. The
decode batch is bounded by B − I (room for one prompt beside it), and I ≤ B: the scheduler never splits a prompt and
stops at one that does not fit even an empty step, so a longer prompt would never run."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from functools import lru_cache
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.memory import activation_element_bytes
from tfcalc.count.model.quant import WeightFormat
from tfcalc.count.perf import collectives, gemm
from tfcalc.count.perf.inference import Overhead, step_seconds
from tfcalc.count.serving.roofline import Row, Step, experts_touched, prefill_step
from tfcalc.count.serving.serving_tp import TensorParallel, step_collectives
from tfcalc.count.training.comm import sent_bytes
from tfcalc.errors import InputError

DEFAULT_BUDGET = 8192  # vLLM V1's max_num_batched_tokens, OpenAI server, GPU of >= 70 GiB (module docstring)
BUDGET_LIMIT = 1 << 20
SAMPLED = 8  # chunks priced one by one at most; beyond, evenly spaced ones stand for the rest (ChunkedPrefill)
SPREAD = 4 * max(tm for tm, _ in gemm.TILES)  # rows the mean of step 3 spreads over (1,024), in SAMPLES batches
SAMPLES = 8


def check_budget(budget: object) -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or not 2 <= budget <= BUDGET_LIMIT:
        raise InputError(f"--prefill-chunk must be a whole number of tokens per step from 2 to {BUDGET_LIMIT:,} "
                         f"(0: prefill unchunked); got {str(budget)[:40]!r}")


def applies(cfg: ModelConfig) -> bool:
    """Whether the model's prompt can be chunked here: decoder-only (no encoder, no cross-attention)."""
    return not cfg.architecture.has_cross_attention  # an encoder-decoder's decoder attends across too


def chunk_step(cfg: ModelConfig, start: int, size: int, fmt: WeightFormat, kv_dtype: str) -> Step:
    """``size`` prompt tokens at positions [start, start + size) of one sequence, attending to the ``start``
    positions cached before them and causally to each other; the LM head on one position (step 1): the
    roofline's prefill step of one sequence from ``start``."""
    return prefill_step(cfg, 1, size, fmt, kv_dtype, start=start)


def _merged_weights(cfg: ModelConfig, d: Row, p: Row, tokens: tuple[int, int]) -> int:
    """The weights a merged row reads once: a MoE's experts those the n + c tokens touch together,
    E·(1 − (1 − k/E)^(n + c)) of E (roofline.experts_touched, uniform routing), from the chunk's share of
    them; any other matrix whole, as either part reads it."""
    if not d.component.startswith("expert_ffn"):
        return max(d.weight_bytes, p.weight_bytes)
    moe = next(b.ffn for _, b, _ in cfg.architecture.kinds() if b.is_moe)
    n, c = tokens
    share = experts_touched(moe.n_expert, moe.top_k, n + c) / experts_touched(moe.n_expert, moe.top_k, c)
    return max(d.weight_bytes, round(p.weight_bytes * share))


def _merge_row(cfg: ModelConfig, d: Row, p: Row, tokens: tuple[int, int]) -> Row:
    """One GEMM over both parts' rows: FLOPs and activations add, the weights read once (step 1)."""
    m = d.shape[0] + p.shape[0]
    return replace(d, flops=d.flops + p.flops, weight_bytes=_merged_weights(cfg, d, p, tokens),
                   kv_bytes=d.kv_bytes + p.kv_bytes, activation_bytes=d.activation_bytes + p.activation_bytes,
                   shape=(m, d.shape[1], d.shape[2]))


def mixed_step(cfg: ModelConfig, decode: Step, chunk: Step) -> Step:
    """Step 1: the decode step's rows and the chunk's, each matmul with weights merged."""
    mine = {(r.component, r.label): r for r in chunk.rows if not r.mixing}
    rows, used = [], set()
    for r in decode.rows:
        key = (r.component, r.label)
        if not r.mixing and key in mine and r.shape[1:] == mine[key].shape[1:]:
            rows.append(_merge_row(cfg, r, mine[key], (decode.batch, chunk.queries)) if r.component != "other" else
                        replace(r, weight_bytes=max(r.weight_bytes, mine[key].weight_bytes)))
            used.add(key)
        else:
            rows.append(r)
    rows += [r for r in chunk.rows if r.mixing or (r.component, r.label) not in used]
    return Step("mixed", decode.batch + 1, 1, max(decode.context, chunk.context), tuple(rows))


def mixed_comm_seconds(cfg: ModelConfig, tp: TensorParallel, n: int, size: int, act_bytes: int) -> float:
    """Step 2 under tensor parallelism: the mixed step's collectives (serving_tp.step_collectives), each call
    once over both parts' rows -- the all-reduces over n + size tokens, the logits' all-gather over the n decode
    tokens and the chunk's last position -- on the node's link, as NCCL's cost model runs them."""
    ops = step_collectives(cfg, n + size, 1, act_bytes, True, None, tp.tp)
    *reduces, (gather, calls, payload) = ops
    ops = [*reduces, (gather, calls, payload * (n + 1) // (n + size))]
    return sum(collectives.nccl_seconds(op, k * pay, k * sent_bytes(op, pay, tp.tp), tp.tp, 1, k, tp.link,
                                        tp.link_bytes_per_s * tp.efficiency) for op, k, pay in ops)


ONCE = ("kernels", "kernel_s", "dequant_s", "host_s")  # a step's fixed costs: the larger part's, once


def merge_overhead(d: Optional[Overhead], p: Optional[Overhead], comm_s: float = 0.0) -> Optional[Overhead]:
    """Step 2: one step's fixed costs (kernels, dequantization, the host: the larger part's, once), ``comm_s``
    the mixed step's collectives (mixed_comm_seconds), no request's fixed work, and every other cost, which
    grows with the tokens (the elementwise traffic, and any term the performance model adds), both parts'."""
    if d is None or p is None:
        return d or p
    merged = {f.name: getattr(d, f.name) + getattr(p, f.name) for f in fields(d)
              if isinstance(getattr(d, f.name), float) and f.name not in ONCE}
    merged.update({name: max(getattr(d, name), getattr(p, name)) for name in ONCE})
    return replace(d, **{**merged, "comm_s": comm_s, "request_s": 0.0})


def check_whole(prompt: int, budget: int, what: str = "--mean-input") -> None:
    """Whole prompts in the budget (module docstring, last paragraph): each must fit a step's tokens; ``what`` names
    the tokens computed (a cached prefix's: the uncached ones, tfcalc.count.serving.prefix)."""
    if prompt > budget:
        raise InputError(f"--context-chunking off: each prompt runs whole in one step, so {what} ({prompt:,}) "
                         f"must fit the step's budget --prefill-chunk ({budget:,}): TensorRT-LLM's scheduler without "
                         "chunked context never runs a longer prompt")


def chunks(prompt: int, budget: int, n: int, split: bool = True) -> list[tuple[int, int]]:
    """Step 3: (start, size) of each chunk of a prompt of ``prompt`` tokens beside n decode tokens; ``split`` False:
    the prompt whole, one chunk (whole prompts in the budget)."""
    if not split:
        return [(0, prompt)]
    size = max(1, min(prompt, budget - n))
    return [(s, min(size, prompt - s)) for s in range(0, prompt, size)]


class ChunkedPrefill:
    """A prompt's GPU seconds under chunked prefill beside n decode tokens (step 3), cached per whole n.
    ``engine``: tfcalc.count.serving.continuous.Engine (its decode steps, sharding and ceilings); ``split`` False:
    whole prompts in the budget (module docstring, last paragraph); ``prompt`` the tokens to compute, from position
    ``start`` (a cached prefix's P, tfcalc.count.serving.prefix; 0: the whole prompt)."""

    def __init__(self, engine, prompt: int, budget: int, split: bool = True, start: int = 0):
        if not split:
            check_whole(prompt, budget)
        self.e, self.prompt, self.budget, self.split = engine, prompt, budget, split
        self.start = start  # a cached prefix of P: the prompt's I − P tokens from position P (serving.prefix, step 2)
        # the decode batch that leaves a prompt room (whole prompts: at least one sequence decodes, as when I = B)
        self.max_decode = budget - 1 if split else max(1, budget - prompt)
        self.act = activation_element_bytes(engine.fmt.compute_dtype)
        self.whole = lru_cache(maxsize=None)(self._whole)
        self.window = lru_cache(maxsize=None)(self._window)
        self._chunk = lru_cache(maxsize=None)(self._chunk_parts)

    def _chunk_parts(self, start: int, size: int) -> tuple[Step, Optional[Overhead]]:
        e = self.e
        step = e.shard.step(chunk_step(e.cfg, start, size, e.fmt, e.kv))
        return step, e.overhead(step)

    def step_s(self, n: int, start: int, size: int) -> float:
        """T(n, chunk): a mixed step's seconds (step 2); n = 0: the chunk alone."""
        chunk, over = self._chunk(start, size)
        if n == 0:
            return step_seconds(chunk.time_s(self.e.c), over)
        decode, d_over = self.e.decode_parts(n)
        tp = self.e.tp
        comm = 0.0 if tp is None or tp.tp == 1 else mixed_comm_seconds(self.e.cfg, tp, n, size, self.act)
        mixed = mixed_step(self.e.cfg, decode, chunk)
        return step_seconds(mixed.time_s(self.e.c), merge_overhead(d_over, over, comm))

    def _whole(self, n: int) -> float:
        base = self.e.step_s(n) if n else 0.0
        parts = [(self.start + s, c) for s, c in chunks(self.prompt, self.budget, n, self.split)]
        if len(parts) <= SAMPLED:
            return sum(self.step_s(n, s, c) - base for s, c in parts)
        # many chunks (n near the budget): a chunk's cost grows with its start only through the cache its
        # attention reads, near linearly, so SAMPLED evenly spaced full chunks stand for all of them
        full, (s_last, c_last) = parts[:-1], parts[-1]
        pick = [full[round(i * (len(full) - 1) / (SAMPLED - 1))] for i in range(SAMPLED)]
        sampled = sum(self.step_s(n, s, c) - base for s, c in pick) * len(full) / SAMPLED
        return sampled + self.step_s(n, s_last, c_last) - base

    def _window(self, base: int, gap: int) -> float:
        return sum(self.whole(base + gap * (i - SAMPLES // 2)) for i in range(SAMPLES)) / SAMPLES

    def expected(self, n: int) -> float:
        """Step 3's mean over where the decode batch falls: ``whole`` at SAMPLES batches a gap g apart around n,
        g = s / SAMPLES, s = min(n, SPREAD) rounded down to a power of two; the windows on multiples of g, linear
        between them (neighbouring n share their samples: one new step priced per window). n < SAMPLES: whole(n)."""
        if n < SAMPLES:
            return self.whole(n)
        gap = min(SPREAD, 1 << (n.bit_length() - 1)) // SAMPLES
        lo, frac = divmod(n, gap)
        below = self.window(lo * gap, gap)
        return below if not frac else below + frac / gap * (self.window((lo + 1) * gap, gap) - below)

    def seconds(self, n: float) -> float:
        """t_p(n), the mean over a tile period (``expected``), linear between whole n (step 3)."""
        lo = math.floor(n)
        return self.expected(lo) + (n - lo) * (self.expected(lo + 1) - self.expected(lo))

    def steps(self, n: float) -> int:
        """The steps a prompt's chunks take beside about n decode tokens."""
        return len(chunks(self.prompt, self.budget, round(n), self.split))

    def service(self, n: float) -> float:
        """S(n): the time a prompt holds the steps' prompt budget (step 4): its share of the steps, I / (B − n)
        of one step's room, each τ(n) long (none at n < 1 steps: its chunks run alone), and t_p(n). Prompts
        pack the budget first come, first served, so the prompts wait on each other as at one server of S. Whole
        prompts: a step's room holds ⌊(B − n)/I⌋ of them, each its share of the step."""
        if not self.split:
            per_step = max(1, int(self.budget - n) // self.prompt)
            return min(n, 1.0) * self.e.tau(n) / per_step + self.seconds(n)
        return min(n, 1.0) * self.e.tau(n) * self.prompt / max(1.0, self.budget - n) + self.seconds(n)
