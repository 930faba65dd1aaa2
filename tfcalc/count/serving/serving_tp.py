"""Tensor-parallel serving (``infer --tp T``): one model's weights, heads and KV cache split over T GPUs of
one node, Megatron-style (Shoeybi et al. 2019, sec. 3), as TensorRT-LLM and vLLM shard a model for
inference. Pure arithmetic: each roofline row of a step (tfcalc.count.serving.roofline) becomes one GPU's share.

1. Column-parallel (Q, K, V, gate, up; latent attention's up-projections q_b and kv_b; each expert's gate
   and up; the LM head, vocabulary-parallel): the output width n / T. Row-parallel (O, down, an expert's
   down): the input width k / T. FLOPs and weight bytes / T; the input activation is read whole by a
   column-parallel matmul and the output written whole by a row-parallel one.
2. Attention: the query heads / T (T must divide every attention's n_head). KV heads / T when T divides
   n_kv_head; when T > n_kv_head and n_kv_head divides T, each GPU holds one KV head, replicated T /
   n_kv_head times (TensorRT-LLM's and vLLM's rule for GQA): K and V weights, cache and reads are then
   1 / n_kv_head of the whole per GPU, not 1 / T. A latent attention's cache (DeepSeek's MLA) is one
   latent per position shared by all heads: every GPU holds all of it (vLLM does). Its absorbed decode's
   per-head W_UK and W_UV (tfcalc.count.serving.roofline) split by heads: FLOPs, weights and activations / T.
3. Replicated, whole on every GPU: norms, the router, latent attention's down-projections (q_a, kv_a),
   position embeddings, and the biases of row-parallel layers; the token embedding is vocabulary-parallel
   (/ T). A mixture's experts are split like dense FFNs (every expert's hidden width / T; vLLM's default
   without expert parallelism).
4. Communication: one all-reduce after each attention sub-layer (self and cross) and one after each FFN,
   and one after the vocabulary-parallel embedding's lookup (each GPU looks up the ids in its rows, the
   partial sums are added: Megatron's and vLLM's VocabParallelEmbedding), each of tokens × d_model
   activations (tokens = batch × new tokens per sequence), plus one all-gather of the logits (batch ×
   vocabulary) for the sampled positions. Each call as NCCL's cost model runs it on the node's link
   (tfcalc.count.perf.collectives.nccl_call: ring or tree, LL, LL128 or Simple, NCCL's latencies and
   bandwidth shares), not overlapped with the matmuls (the runtimes of the calibration set run them in
   sequence).

Worked example (tests/count/test_serving_tp.py): Llama 2 70B (64 heads, 8 KV heads, 80 layers) at T = 4
decoding batch 1 in fp16 runs 1 + 2 · 80 = 161 all-reduces of 8,192 × 2 = 16,384 bytes and one
all-gather of 32,000 × 2 bytes per step; on A100 NVLink (300 GB/s × 0.8 = 240 GB/s of bus bandwidth) NCCL
runs both as ring LL: each all-reduce 3.6 + 6 · 0.47 = 6.42 µs + 1.5 · 16,384 B at a quarter of the bus
(0.41 µs), the all-gather 3.6 + 3 · 0.47 = 5.01 µs + 0.75 · 64,000 B at a third (0.6 µs): 161 · 6.8296 +
5.61 µs = 1.1052 ms (the α-β ring of 2 µs a step said 1.9547 ms): at batch 1 the latency is nearly all of
it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from fractions import Fraction

from tfcalc.config import ModelConfig
from tfcalc.count.model.dtypes import state_dtype, weight_bytes
from tfcalc.count.model.memory import cross_kv_cache_bytes, kv_cache_bytes
from tfcalc.count.model.params import param_entries
from tfcalc.count.model.quant import WeightFormat, entry_bytes, stored_format
from tfcalc.count.perf import collectives
from tfcalc.count.serving.roofline import ABSORBED, Row, Step, param_component
from tfcalc.count.training.comm import sent_bytes
from tfcalc.errors import InputError
from tfcalc.workload import Workload

COLUMN = ("q", "k", "v", "gate", "up", "qkv", "b")  # "b": latent attention's q_b and kv_b
ROW = ("o", "down")
REPLICATED = ("router", "a", "in", "out")  # latent down-projections q_a/kv_a; OPT's project_in/out


@dataclass(frozen=True)
class TensorParallel:
    """T GPUs of one node and the link between them (tfcalc.count.perf.hardware's α and efficiency)."""

    tp: int
    link: str  # 'nvlink' or 'pcie'
    link_bytes_per_s: float  # per GPU, one direction
    latency_s: float
    efficiency: float


def _attentions(cfg: ModelConfig):
    """Every distinct token mixer and cross-attention (tfcalc.architecture.mixer), in model order."""
    for _, block, _ in cfg.architecture.kinds():
        for a in (block.mixer, block.cross_attention):
            if a is not None:
                yield a


def _kv_mixer(cfg: ModelConfig):
    """The first mixer whose state grows with the tokens (K and V), else the first mixer, or None."""
    mixers = list(_attentions(cfg))
    return next((m for m in mixers if any(t.per_token for t in m.state())), mixers[0] if mixers else None)


def _state_heads(a) -> int | None:
    """The heads the mixer's state splits by under TP (its declared rule); None: kept whole (a latent cache)."""
    return a.tp_state_heads()


def check_tp(cfg: ModelConfig, tp: int, gpus_per_node: int) -> None:
    """The rule of the module docstring: T ≤ the node's GPUs; T divides every attention's query heads,
    and its KV heads divide T or T divides them; T divides each dense FFN's hidden width."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InputError(f"--tp must be a positive integer; got {tp!r}")
    if tp == 1:
        return
    if tp > gpus_per_node:
        raise InputError(f"--tp {tp} is more GPUs than one node holds ({gpus_per_node}): tensor parallelism "
                         "needs the node's link")
    for a in _attentions(cfg):
        heads = dict(a.tp_widths()).get("n_head", 0)
        if heads % tp:
            raise InputError(f"--tp {tp} does not divide {cfg.name}'s {heads} query heads: each GPU needs "
                             "whole heads")
        kv = _state_heads(a)
        if kv is not None and kv % tp and tp % kv:
            raise InputError(f"--tp {tp} and {cfg.name}'s {kv} KV heads: one must divide the other "
                             "(each GPU holds whole KV heads, replicated when T is larger)")
    for _, block, _ in cfg.architecture.kinds():
        d_ff = block.ffn.d_ff if not block.is_moe else getattr(block.ffn, "d_ff", None)
        if d_ff and d_ff % tp:
            raise InputError(f"--tp {tp} does not divide {cfg.name}'s FFN width {d_ff}")


def kv_share(cfg: ModelConfig, tp: int) -> Fraction:
    """One GPU's share of the K/V heads (weights, cache, reads): 1/T, 1/n_kv_head when replicated, 1 for a
    latent cache (module docstring, step 2); the first attention's (every layer's, in the presets): the first
    mixer whose state grows with the tokens (a hybrid's attention, not its convolution or DeltaNet: their fixed
    states each at their own share, ``state_bytes_per_gpu``), else the first mixer."""
    a = _kv_mixer(cfg)
    kv = None if a is None else _state_heads(a)
    if kv is None or tp == 1:
        return Fraction(1)
    return Fraction(1, min(tp, kv))


def mixer_share(mixer, tp: int) -> Fraction:
    """One GPU's share of one mixer's state (step 2): 1/T of its state heads, 1/heads when T exceeds them, 1 for a
    state kept whole (a latent cache)."""
    heads = _state_heads(mixer)
    return Fraction(1) if heads is None or tp == 1 else Fraction(1, min(tp, heads))


@functools.lru_cache(maxsize=64)
def _row_shares(cfg: ModelConfig, tp: int) -> dict[str, Fraction]:
    """{mixing row's component: the share of the state it reads} where the decoder's mixers split their states
    unlike one another (a hybrid: Qwen3-Next's 2 KV heads, replicated at T = 4, beside its DeltaNet's 16 key
    heads, split); "state_write" (roofline: the fixed state written back) at the fixed-state mixers' share. Empty
    when every mixer splits alike (``kv_share`` then prices every row); a name read at two shares is left out.
    The names a decode step's rows carry (``mixing(step=True)``): the rows that read a state."""
    kinds = [b.mixer for b, _ in cfg.architecture.decoder.kinds()] if cfg.architecture.decoder is not None else []
    if len({mixer_share(m, tp) for m in _attentions(cfg)}) <= 1:
        return {}
    out: dict[str, set[Fraction]] = {}
    for m in kinds:
        f = mixer_share(m, tp)
        for mm in m.mixing(1, 2, step=True):  # the rows a decode step reads its state in (a forward's names may
            out.setdefault("attn_" + mm.name, set()).add(f)  # clash: the DeltaNet's chunk "av" reads none)
        if any(t.fixed for t in m.state()):
            out.setdefault("state_write", set()).add(f)
    return {name: next(iter(shares)) for name, shares in out.items() if len(shares) == 1}


def row_kv_share(component: str, cfg: ModelConfig, tp: int) -> Fraction:
    """One GPU's share of the state a mixing row reads (or writes): its mixer's (``_row_shares``), else kv_share."""
    return _row_shares(cfg, tp).get(component) or kv_share(cfg, tp)


def state_bytes_per_gpu(cfg: ModelConfig, w: Workload, tp: int, spare: int = 0) -> int:
    """The generation state one GPU holds (kv_cache_bytes, ``spare`` as there): the whole at T = 1; the whole times
    kv_share where every mixer splits alike; else each layer kind's state at its mixer's share (step 2), the
    cross-attention cache at the first cross-attention's. Qwen3-Next at T = 4: the 12 attention layers' K/V (2 KV
    heads, each on 2 GPUs) / 2, the 36 DeltaNet layers' fixed state (16 key heads) / 4."""
    total = kv_cache_bytes(cfg, w, spare)
    if tp == 1:
        return total
    if not _row_shares(cfg, tp):
        f = kv_share(cfg, tp)
        return total * f.numerator // f.denominator
    own, context = 0, w.seq + w.gen
    for b, n in cfg.architecture.decoder.kinds():
        f = mixer_share(b.mixer, tp)
        nbytes = sum(weight_bytes(w.batch * n * t.elements(context, spare), state_dtype(t.dtype, w.kv, w.dtype))
                     for t in b.mixer.state())
        own += nbytes * f.numerator // f.denominator
    cross = next((b.cross_attention for _, b, _ in cfg.architecture.kinds() if b.cross_attention is not None), None)
    f = Fraction(1) if cross is None else mixer_share(cross, tp)
    return own + cross_kv_cache_bytes(cfg, w) * f.numerator // f.denominator


def kv_replicated(cfg: ModelConfig, tp: int) -> int:
    """How many GPUs hold each KV head (1: none replicated)."""
    a = _kv_mixer(cfg)
    kv = None if a is None else _state_heads(a)
    return 1 if kv is None or tp <= kv else tp // kv


def _kind(component: str) -> str:
    """'column', 'row', 'heads' or 'whole' (module docstring) of a weight's matmul; a position-mixing row is
    split by its heads (shard_row reads Row.mixing)."""
    if component in ABSORBED:  # a latent decode's W_UK and W_UV: one matmul per head, the heads split
        return "heads"
    if component == "lm_head":
        return "column"
    tail = component.rsplit("_", 1)[-1]
    if component.endswith("router") or tail in REPLICATED or component == "other":
        return "whole"
    return "column" if tail in COLUMN else "row" if tail in ROW else "whole"


def _scale(value: int, f: Fraction) -> int:
    return value * f.numerator // f.denominator


def _share(component: str, cfg: ModelConfig, tp: int) -> Fraction:
    """The share of a matmul's FLOPs and weights one GPU holds."""
    if component.rsplit("_", 1)[-1] in ("k", "v"):
        return kv_share(cfg, tp)
    return Fraction(1, tp) if _kind(component) != "whole" else Fraction(1)


def shard_row(row: Row, cfg: ModelConfig, tp: int) -> Row:
    """One GPU's share of a roofline row."""
    kind, m, k, n = "scores" if row.mixing else _kind(row.component), *row.shape
    if tp == 1 or kind == "whole":
        return row
    if kind in ("scores", "heads"):
        f = Fraction(1, tp)
        kv = _scale(row.kv_bytes, row_kv_share(row.component, cfg, tp))
        return replace(row, flops=_scale(row.flops, f), kv_bytes=kv,
                       weight_bytes=_scale(row.weight_bytes, f), activation_bytes=_scale(row.activation_bytes, f),
                       count=max(1, row.count // tp))
    f = _share(row.component, cfg, tp)
    if kind == "column":
        shape, act = (m, k, max(1, _scale(n, f))), Fraction(m * k) + m * n * f
    else:
        shape, act = (m, max(1, _scale(k, f)), n), m * k * f + m * n
    act_f = act / (m * k + m * n) if m * (k + n) else Fraction(1)
    return replace(row, flops=_scale(row.flops, f), weight_bytes=_scale(row.weight_bytes, f),
                   activation_bytes=_scale(row.activation_bytes, act_f), shape=shape)


def shard_step(step: Step, cfg: ModelConfig, tp: int, other_bytes: int) -> Step:
    """One GPU's share of a step; ``other_bytes`` the GPU's weights no matmul reads (other_weights_bytes)."""
    if tp == 1:
        return step
    rows = tuple(replace(r, weight_bytes=other_bytes) if r.component == "other" else shard_row(r, cfg, tp)
                 for r in step.rows)
    return replace(step, rows=rows)


def _entry_share(component: str, cfg: ModelConfig, tp: int) -> Fraction:
    """A parameter tensor's share on one GPU (module docstring, steps 1-3)."""
    if component == "token_embedding":  # vocabulary-parallel (tied: the LM head's, below)
        return Fraction(1, tp)
    matmul = param_component(component, cfg)
    if matmul is None:
        return Fraction(1)
    if component.endswith("_bias") and _kind(matmul) == "row":  # added once after the all-reduce
        return Fraction(1)
    return _share(matmul, cfg, tp)


def _local_bytes(entry, nbytes: int, f: Fraction, cfg: ModelConfig) -> int:
    """The largest GPU's share of a tensor: its split dimension's ⌈n·f⌉ of n rows (torch.chunk's first
    block, as tfcalc.count.training.shard gives rank 0; a vocabulary of 50,257 over 4 GPUs: 12,565 rows)."""
    if f == 1 or not entry.shape:
        return nbytes
    matmul = param_component(entry.component, cfg)
    dim = 1 if matmul is not None and _kind(matmul) == "row" and len(entry.shape) == 2 else 0
    n = entry.shape[dim]
    return nbytes * -(-n * f.numerator // f.denominator) // n


def entry_bytes_per_gpu(entry, nbytes: int, cfg: ModelConfig, tp: int) -> int:
    """The bytes of one parameter tensor (``entry``, ``nbytes`` stored) on the fullest GPU under TP ``tp``: its
    share (steps 1-3) rounded up to whole rows of its split dimension. The one rule for every tensor that TP splits,
    also expert_parallel's for the tensors outside the routed experts."""
    return _local_bytes(entry, nbytes, _entry_share(entry.component, cfg, tp), cfg)


def weights_per_gpu(cfg: ModelConfig, fmt: WeightFormat, tp: int, decode: bool = False) -> dict[str, int]:
    """{'total': bytes one GPU stores, 'other': of them, the weights no matmul reads (roofline's row)}."""
    mxfp4, total, other = stored_format(cfg, fmt), 0, 0
    for entry in param_entries(cfg):
        b = entry_bytes_per_gpu(entry, entry_bytes(entry, fmt, mxfp4).total, cfg, tp)
        total += b
        if param_component(entry.component, cfg) is None and not (decode and entry.stack == "encoder"):
            other += b
    return {"total": total, "other": other}


def allreduce_calls(cfg: ModelConfig, decode: bool) -> list[tuple[int, bool]]:
    """(all-reduces per step, on the encoder's tokens) for each stack a step runs: one for its
    vocabulary-parallel embedding lookup, one per attention sub-layer and one per FFN of each block (a
    decode step runs the decoder only)."""
    out = []
    for stack in cfg.architecture.stacks:
        encoder = stack is not cfg.architecture.output
        if decode and encoder:
            continue
        out.append((1, encoder))
        for block, n in stack.kinds():
            per = (block.mixer is not None) + (block.cross_attention is not None) + 1
            out.append((per * n, encoder))
    return out


def step_collectives(cfg: ModelConfig, batch: int, queries: int, act_bytes: int, decode: bool,
                     src_seq: int | None = None, tp: int = 1) -> list[tuple[str, int, int]]:
    """(op, calls, payload bytes of one call) of one step (module docstring, step 4): the all-reduces of
    each stack it runs, then the all-gather of the sampled positions' logits (the last one of a prefill):
    T equal shards of ⌈V/T⌉ columns each (torch.chunk's, padded: a collective moves equal shards), so
    GPT-2's 50,257 over 2 GPUs gather 50,258."""
    out = []
    for calls, encoder in allreduce_calls(cfg, decode):
        tokens = batch * (src_seq if encoder and src_seq else queries)
        out.append(("all_reduce", calls, tokens * cfg.architecture.d_model * act_bytes))
    vocab = -(-cfg.architecture.head.vocab_size // tp) * tp
    out.append(("all_gather", 1, batch * (queries if decode else 1) * vocab * act_bytes))
    return out


def comm_seconds(cfg: ModelConfig, t: TensorParallel, batch: int, queries: int, act_bytes: int, decode: bool,
                 src_seq: int | None = None) -> float:
    """The step's collectives (step_collectives) on the node's link, each call as NCCL's cost model runs it."""
    if t.tp == 1:
        return 0.0
    return sum(collectives.nccl_seconds(op, calls * payload, calls * sent_bytes(op, payload, t.tp), t.tp, 1, calls,
                                        t.link, t.link_bytes_per_s * t.efficiency)
               for op, calls, payload in step_collectives(cfg, batch, queries, act_bytes, decode, src_seq, t.tp))
