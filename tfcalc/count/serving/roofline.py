"""The roofline model of inference (Williams et al. 2009, "Roofline"), per matmul and per step. Pure
arithmetic, no torch.

Each matmul of a step (tfcalc.count.model.flops.matmul_entries) is a row with its FLOPs and the bytes it moves:
- weights: the matrix (and its bias) in the weight format (tfcalc.count.model.quant: scales and zero points
  included), read once per step whatever the batch -- the whole point of batching;
- KV: the keys (Q·Kᵀ) and values (attention·V) read, in the cache's dtype (``kv_dtype``, apart from the
  weights'): a decode step reads context positions per sequence, min(context, W) with a sliding window
  (its own and the W - 1 before it, the ring tfcalc.model reads); tfcalc's own runtime reads a bucket of
  its cache (the live length rounded up to a power of two, tfcalc.model.cache), so a measured run also
  prices its steps with the bucket (``read_span``) as the context, and so does the prediction of that run
  (tfcalc.count.serving.static.estimate, ``span``; the JSON's ``bytes_per_token_read``, beside the live
  context's ``bytes_per_token_live``);
  each KV head once for its whole group of query heads (GQA), as fused decode kernels do;
- activations: a linear layer reads its input (m, k) and writes its output (m, n); attention reads Q and
  writes its output; the scores never leave the fused kernel (flash attention). In the activation dtype.

A row's arithmetic intensity is FLOPs / bytes; the device's ridge point is peak FLOP/s / bandwidth. A row
below the ridge is memory-bound and takes bytes / bandwidth, above it compute-bound and takes FLOPs /
peak: predicted time = the slower of the two, summed over the rows (each matmul waits for the previous
one; no overlap between rows is assumed, so the sum is an upper bound on a perfect kernel schedule).

Conventions, each one the usual one for serving estimates:
- Every weight is read once per step, including the parameters no matmul multiplies (norms, and the
  token embedding table: a lookup reads only B rows of it, but published per-token figures count the
  whole table, and so do we; for Llama 2 7B that is 262 MB of 13.5 GB). They form the row "other weights"
  (0 FLOPs). A MoE reads only the experts some token is routed to: with uniform routing, the expected
  number of distinct experts per layer is E·(1 − (1 − k/E)^tokens), tokens = B (decode) or B·T (prefill).
  An encoder-decoder's decode step reads neither the encoder nor the cross-attention K/V projections
  (their output is cached once per source).
- A fixed state (a gated DeltaNet's recurrent state S, a convolution's ring of K inputs: ``StateTensor.fixed``)
  is read whole by its mixing rows and written back whole every decode step: the row "state_write" (0 FLOPs,
  its bytes in the state's own dtype: S in fp32). Per token and DeltaNet layer of Qwen3-Next-80B-A3B: S read
  32·128·128·4 = 2 MiB and written 2 MiB, the conv ring 8,192·4·2 = 64 KiB each way; a growing K/V writes one
  position (2·n_kv·d_head elements a layer), left out as before (under 1/context of what it reads).
- ``bytes_per_token`` is weights + KV (state) read and written per decode step, divided by the batch: the figure
  published estimates quote (Llama 2 7B, bf16, batch 1, context 4096: 13,476,831,232 + 2,147,483,648 =
  15,624,314,880 bytes, ≈ 214 tokens/s on an H100 SXM at 3.35 TB/s). Activation traffic (a few MB per
  step at batch 1) is reported apart and included in the predicted time.
- A decode step counts latent attention (DeepSeek's MLA) in its absorbed form, the form tfcalc's module and
  MLA-aware servers run (tfcalc.architecture.latent, step 6): no expansion of the cached latents, multi-query
  scores over [c_kv | k_r] and attention·V over c_kv, W_UK and W_UV per head; W_kvb's bytes read once, split
  between those two rows. A prefill and a verify step run (and count) the naive form.
- FLOPs: a decode step's scores are over its context (no square); a prefill's over the causal pairs
  (T·(T+1)/2 per head, or the windowed count), because fused causal kernels skip masked blocks. A
  prefill computes the logits of its last position only (what generation needs), B rows of the LM head.
- Non-matmul work (norms, softmax, activations) is left out of the rows' FLOPs; its time is in the
  performance model's per-step overhead (tfcalc.count.perf.inference), with the kernels' fixed costs.

The performance model (``Ceilings.perf``, for a datasheet device): a row's compute time divides by the
peak times its matmul's efficiency (its GEMM shape's, tfcalc.count.perf.gemm; fused attention's for the
scores), and ``bytes_per_s`` is the achievable bandwidth. Without it (a measured device's ceilings),
the plain roofline above.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.dtypes import state_dtype, weight_bytes
from tfcalc.count.model.flops import MatmulEntry, matmul_entries
from tfcalc.count.model.memory import activation_element_bytes, state_split
from tfcalc.count.model.params import param_entries
from tfcalc.count.model.quant import WeightFormat, entry_bytes, stored_format
from tfcalc.count.perf.hardware import PerfSpec
from tfcalc.count.perf.inference import row_efficiency, runs_fp8
from tfcalc.errors import InputError
from tfcalc.workload import Workload, decoder_source

ABSORBED = ("attn_uk", "attn_uv")  # a latent attention's decode: W_kvb's halves, once per head
MIN_BUCKET = 16  # the smallest span tfcalc's decode step reads: fewer graphs for short contexts


def read_span(live: int, max_tokens: int) -> int:
    """The keys tfcalc's decode step reads with ``live`` positions written (its own included), in a cache of
    ``max_tokens`` slots: the live length rounded up to a power of two, at least MIN_BUCKET, at most max_tokens
    (litgpt's ``input_pos_maxp1``; tfcalc.model.cache reads its state so). A windowed layer of W reads
    min(span, W) of them, as ``decode_step`` prices a context."""
    return min(max_tokens, max(MIN_BUCKET, 1 << max(0, live - 1).bit_length()))


@dataclass(frozen=True)
class Ceilings:
    """What the roofline divides by: a device's peak FLOP/s for the compute dtype and its bandwidth."""

    flops_per_s: float
    bytes_per_s: float  # with a performance model: the achievable bandwidth
    source: str  # e.g. 'h100-sxm datasheet, bf16' or 'measured on cpu'
    perf: Optional[PerfSpec] = None  # the performance model's device properties (None: the plain roofline)
    fp32_flops_per_s: Optional[float] = None  # the CUDA cores' rate (dequantization)
    # FP8 weights (flops_per_s the FP8 peak): the 16-bit peak attention's score products and the LM head
    # run at (tfcalc.count.perf.fp8_time, step 3); None: every row at flops_per_s
    high_flops_per_s: Optional[float] = None

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the two roofs meet."""
        return self.flops_per_s / self.bytes_per_s

    def fp8(self, row: "Row") -> bool:
        """Whether the row is an FP8 GEMM (FP8 weights, a quantized block matrix)."""
        return self.high_flops_per_s is not None and runs_fp8(row.component, row.mixing)

    def peak(self, row: "Row") -> float:
        """The datasheet peak the row's matmul runs at."""
        return self.flops_per_s if self.high_flops_per_s is None or self.fp8(row) else self.high_flops_per_s

    def efficiency(self, row: "Row") -> float:
        """The share of the peak the row's matmul reaches (1 without a performance model)."""
        if self.perf is None or not row.flops:
            return 1.0
        return row_efficiency(row.component, row.shape, row.count, self.perf, self.fp8(row), row.mixing)

    def rate(self, row: "Row") -> float:
        """FLOP/s the row's matmul reaches: its peak times its efficiency."""
        return self.peak(row) * self.efficiency(row)


@dataclass(frozen=True)
class Row:
    """One matmul of a step (all its copies over the layers), or the weights no matmul reads."""

    component: str
    label: str
    flops: int
    weight_bytes: int
    kv_bytes: int
    activation_bytes: int
    shape: tuple[int, int, int] = (0, 0, 0)  # (m, k, n) of one GEMM (a mixture's: per expert, m = rows / E)
    count: int = 1  # GEMMs of that shape per layer (score products: batch × heads; experts: E)
    mixing: bool = False  # a position-mixing matmul (MatmulEntry.mixing): no weights, split by heads under TP

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.activation_bytes

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")

    def compute_s(self, c: Ceilings) -> float:
        return self.flops / c.rate(self)

    def memory_s(self, c: Ceilings) -> float:
        return self.bytes / c.bytes_per_s

    def time_s(self, c: Ceilings) -> float:
        return max(self.compute_s(c), self.memory_s(c))

    def bound(self, c: Ceilings) -> str:
        return "compute" if self.compute_s(c) >= self.memory_s(c) else "memory"


@dataclass(frozen=True)
class Step:
    """One forward step: a prefill of ``queries`` tokens per sequence, or a decode step (queries = 1) at
    ``context`` positions."""

    phase: str  # 'prefill' or 'decode'
    batch: int
    queries: int
    context: int
    rows: tuple[Row, ...]

    def _sum(self, name: str) -> int:
        return sum(getattr(r, name) for r in self.rows)

    @property
    def flops(self) -> int:
        return self._sum("flops")

    @property
    def weight_bytes(self) -> int:
        return self._sum("weight_bytes")

    @property
    def kv_bytes(self) -> int:
        return self._sum("kv_bytes")

    @property
    def activation_bytes(self) -> int:
        return self._sum("activation_bytes")

    @property
    def bytes(self) -> int:
        return self._sum("bytes")

    @property
    def bytes_per_token(self) -> float:
        """Weights + KV read per generated token (see the module docstring)."""
        return (self.weight_bytes + self.kv_bytes) / self.batch

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    def time_s(self, c: Ceilings) -> float:
        return sum(r.time_s(c) for r in self.rows)

    def compute_s(self, c: Ceilings) -> float:
        """Its FLOPs' time, each row at its matmul's achievable share of the peak (Row.compute_s)."""
        return sum(r.compute_s(c) for r in self.rows)

    def memory_s(self, c: Ceilings) -> float:
        """Its bytes' time at the (achievable) bandwidth."""
        return sum(r.memory_s(c) for r in self.rows)

    def bound(self, c: Ceilings) -> str:
        """The step as a whole: compute-bound when its FLOPs take longer than its bytes, both at the
        ceilings the rows' times use (a matmul's achievable share of the peak, not the nominal peak: a
        step the prediction times as compute-bound is labelled so)."""
        return "compute" if self.compute_s(c) >= self.memory_s(c) else "memory"


def experts_touched(n_expert: int, active: int, tokens: int) -> float:
    """Expected distinct experts that ``tokens`` tokens, each routed to ``active`` of ``n_expert`` experts
    uniformly at random, touch: E·(1 − (1 − k/E)^tokens)."""
    return n_expert * (1 - (1 - active / n_expert) ** tokens)


def param_component(entry_component: str, cfg: ModelConfig) -> str | None:
    """The matmul a parameter tensor belongs to ('attn_q_weight' -> 'attn_q'), or None (embeddings, norms)."""
    name = entry_component
    head = cfg.architecture.head
    if name == "lm_head" or (name == "token_embedding" and head.lm_head and head.tied):
        return "lm_head"
    if name in ("embedding_project_in", "lm_head_project_out"):  # OPT-350m: tensor and matmul share the name
        return name
    for suffix in ("_weight", "_bias"):
        if name.endswith(suffix) and "norm" not in name and "embedding" not in name:
            return name[: -len(suffix)]
    return None


@functools.lru_cache(maxsize=64)
def weight_bytes_by_component(cfg: ModelConfig, fmt: WeightFormat, decode: bool) -> dict[str, int]:
    """{matmul component or 'other': weight bytes}; a decode step leaves out the encoder's tensors. The
    same for every batch and context: cached (serving's batch searches price dozens of steps); callers
    only read it."""
    out: dict[str, int] = {}
    mxfp4 = stored_format(cfg, fmt)  # weights as the checkpoint stores them (tfcalc.count.model.quant)
    for entry in param_entries(cfg):
        if decode and entry.stack == "encoder":
            continue
        key = param_component(entry.component, cfg) or "other"
        out[key] = out.get(key, 0) + entry_bytes(entry, fmt, mxfp4).total
    return out


def _row(cfg: ModelConfig, e: MatmulEntry, weights: dict[str, int], fmt: WeightFormat, kv_dtype: str,
         batch: int, tokens: int, act: int) -> Row:
    m, k, n = e.shape
    kv = weight_bytes(e.state_read, state_dtype(e.state_dtype, kv_dtype, fmt.dtype))  # the state its mixer reads
    if e.mixing:  # no weights: the state it reads, the activations it says it reads and writes (Mixing.io)
        return Row(e.component, e.label, e.causal_total, 0, kv, act * e.io, e.shape, e.count, mixing=True)
    w = weights.get(e.component, 0)
    shape, count = e.shape, e.count
    if e.component.startswith("expert_ffn"):  # only the experts some token is routed to
        moe = next(b.ffn for _, b, _ in cfg.architecture.kinds() if b.is_moe)
        w = round(w * experts_touched(moe.n_expert, moe.top_k, tokens) / moe.n_expert)
        shape, count = (-(-m // moe.n_expert), k, n), e.count * moe.n_expert  # uniform routing, one GEMM each
    return Row(e.component, e.label, e.total, w, kv, act * (m * k + m * n) * e.count * e.copies, shape, count)


def _absorbed_weights(weights: dict[str, int], entries: list[MatmulEntry]) -> dict[str, int]:
    """A latent attention's absorbed decode (tfcalc.architecture.latent, step 6) reads W_kvb once per step
    through its two halves: W_UK's rows go with the row "attn_uk", W_UV's with "attn_uv", split by elements
    (H·h_n·c_kv and H·c_kv·h_v); the weights as they are otherwise."""
    parts = {e.component: e.shape[1] * e.shape[2] * e.count for e in entries if e.component in ABSORBED}
    if not parts:
        return weights
    whole = weights.get("attn_kv_b", 0)
    uk = whole * parts["attn_uk"] // (parts["attn_uk"] + parts["attn_uv"])
    return {**{c: w for c, w in weights.items() if c != "attn_kv_b"}, "attn_uk": uk, "attn_uv": whole - uk}


def _rows(cfg: ModelConfig, entries: list[MatmulEntry], fmt: WeightFormat, kv_dtype: str, batch: int,
          tokens: int, decode: bool) -> tuple[Row, ...]:
    weights = _absorbed_weights(weight_bytes_by_component(cfg, fmt, decode), entries)
    act = activation_element_bytes(fmt.compute_dtype)
    rows = [_row(cfg, e, weights, fmt, kv_dtype, batch, tokens, act) for e in entries]
    rows.append(Row("other", "other weights (embeddings, norms)", 0, weights.get("other", 0), 0, 0))
    return tuple(rows)


def _check(cfg: ModelConfig, **sizes: int) -> None:
    if cfg.architecture.kind == "encoder" or not cfg.architecture.head.lm_head:
        raise InputError(f"{cfg.name} generates no tokens (an encoder, or no LM head): there is nothing to decode")
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer; got {value!r}")


def decode_step(cfg: ModelConfig, batch: int, context: int, fmt: WeightFormat, kv_dtype: str, *,
                src_seq: Optional[int] = None) -> Step:
    """One decode step: one token per sequence attending to ``context`` positions (itself included)."""
    _check(cfg, batch=batch, context=context)
    src = decoder_source(cfg, context, src_seq)
    entries = matmul_entries(cfg, batch, 1, context, src=src, encoder=False, absorbed=True)  # windows: see _row
    rows = _rows(cfg, entries, fmt, kv_dtype, batch, batch, decode=True)
    written = state_split(cfg, Workload(batch=batch, seq=context, dtype=fmt.dtype, kv_dtype=kv_dtype)).fixed
    if written:  # the fixed state rewritten whole every step (its reads are in the mixing rows)
        rows += (Row("state_write", "fixed state written back (recurrent state, conv ring)", 0, 0, written, 0,
                     mixing=True),)
    return Step("decode", batch, 1, context, rows)


def prefill_step(cfg: ModelConfig, batch: int, seq: int, fmt: WeightFormat, kv_dtype: str, *,
                 src_seq: Optional[int] = None, start: int = 0) -> Step:
    """The prompt: seq tokens per sequence from position ``start`` (0: the whole prompt; more: a chunk of it,
    attending to the start positions cached before it and causally to itself, tfcalc.count.serving.chunked);
    the LM head on the last position only."""
    _check(cfg, batch=batch, seq=seq, context=start + seq)
    src = decoder_source(cfg, seq, src_seq)
    entries = []
    for e in matmul_entries(cfg, batch, seq, start + seq, src=src):
        if e.component == "lm_head":  # logits of the last position only: B rows
            m, k, n = e.shape
            e = MatmulEntry(e.component, e.group, e.label, (batch, k, n), 1, 1, 2 * batch * k * n, e.stack)
        entries.append(e)
    return Step("prefill", batch, seq, start + seq, _rows(cfg, entries, fmt, kv_dtype, batch, batch * seq,
                                                          decode=False))


def verify_step(cfg: ModelConfig, batch: int, queries: int, context: int, fmt: WeightFormat, kv_dtype: str, *,
                src_seq: Optional[int] = None) -> Step:
    """``queries`` new tokens per sequence, the last of ``context`` positions, with the logits of every one:
    speculative decoding's verification of k draft tokens (queries = k + 1; tfcalc.count.serving.speculative).
    Weights read once, each sequence's cache once, as a decode step."""
    _check(cfg, batch=batch, queries=queries, context=context)
    src = decoder_source(cfg, context, src_seq)
    entries = matmul_entries(cfg, batch, queries, context, src=src, encoder=False)
    return Step("decode", batch, queries, context, _rows(cfg, entries, fmt, kv_dtype, batch, batch * queries,
                                                         decode=True))
