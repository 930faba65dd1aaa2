"""How the real model's parameter tensors are split across ranks: pure arithmetic, no torch.

The tensors are a fold over the description (``cfg.architecture.weights()``, tfcalc.architecture), joined
where the model stores them fused (each component's ``Weight.fused``): Q, K and V are one ``attn_qkv``
tensor (rows [Q | K | V], tfcalc.model's ``attn.qkv``) and a gated FFN's gate and up projections one
``ffn_up`` tensor (rows [gate | up]). Every block kind is listed once, with the layers that hold it, so
mixed layers (dense, then MoE) land on the pipeline stages that hold them. Splitting a fused tensor into
contiguous row blocks would hand rank 0 all of Q and rank 1 all of K and V, so for tensor parallelism
the rows are first interleaved by rank -- [Q₀ K₀ V₀ | Q₁ K₁ V₁ | ...], [gate₀ up₀ | gate₁ up₁ | ...] --
and rank r's contiguous block is then its own heads' Q, K and V (its own FFN columns' gate and up):
every part is split evenly, so n_head, n_kv_head and d_ff must be multiples of tp (``check_tp``).
tfcalc.measure.parallelize does exactly this interleaving before sharding the real module.

Tensor parallelism, Megatron-style (Shoeybi et al. 2019, sec. 3; Narayanan et al. 2021, sec. 2.3), as
``parallelize_module`` applies it:

1. column-parallel (dim 0 split, ColwiseParallel): the fused QKV and FFN-up weights and biases;
2. row-parallel (dim 1 split, RowwiseParallel): the attention output and FFN-down weights; their biases
   are added once after the reduction and stay whole;
3. an untied LM head is vocabulary-parallel (dim 0, ColwiseParallel), so the loss runs on vocabulary
   shards (torch's ``loss_parallel``);
4. an untied token embedding is split along the hidden dimension (dim 1, ColwiseParallel on
   nn.Embedding): each rank holds V × d/t and the lookups are all-gathered. Why not Megatron's
   vocabulary split: DTensor's embedding backward has no vocabulary-sharded rule, so with
   RowwiseParallel every rank computes the whole V × d gradient (measured); the hidden split keeps the
   gradient sharded. A tied embedding is one tensor with the head, vocabulary-parallel (Megatron);
5. everything else (norms, position embeddings, biases of row-parallel layers) is replicated.

A split dimension of n rows over t ranks gives rank r ``torch.chunk``'s block: ⌈n/t⌉ rows for the first
ranks, fewer (possibly none) for the last. Per-rank figures are those of rank 0, which holds the largest
block of every tensor.

ZeRO-3 / FSDP (Rajbhandari et al. 2020; PyTorch FSDP2 ``fully_shard``): each tensor -- the TP-local one
under TP -- is split along dim 0 over the dp ranks the same way, and FSDP2 stores every rank's block
padded to ⌈n/dp⌉ rows, so every rank holds the padded size (``fsdp_shard``). Each transformer block is
one FSDP unit, the rest of the model (embeddings, final norm, head) the root unit.

Pipeline parallelism: the blocks are dealt out in contiguous runs, the first L mod p stages one block
more; the embeddings are on the first stage, the final norm and head on the last; a tied embedding is
held by both (Megatron, Narayanan et al. 2021), whose gradients are then all-reduced between the two.
With ``pp_split_counts`` (``--pp-split-counts embedding,head``) the embedding and/or the head (with the
loss) count as one block each when the blocks are divided: U = L + e + h "layers" (e, h 1 when counted)
in p·V chunks of c = U/(p·V) each, model chunk k holding layers [k·c, (k + 1)·c), layer 0 the
embedding (e = 1), layer U − 1 the head (h = 1), block i layer i + e -- Megatron-LM's
--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split (its transformer
layer offset: chunk k's first block is k·c − e), and Llama 3's schedule (Dubey et al. 2024, sec. 3.3.2:
"the first model chunk on the first stage has only the embedding, and the last model chunk on the last
stage has only output projection and loss calculation"; 126 blocks + 2 = 128 = 16 stages × V 8).
Under DualPipeV (``V_SHAPE``, the layout's stage_split under --schedule dualpipev; tfcalc.count.perf.pipeline,
step 5) the blocks are cut into 2p stages as stage_blocks cuts them, rank i holding stages i and 2p − 1 − i:
the first rank holds the embeddings and the head (one tied tensor, once), rank p − 1 the fold.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace
from typing import Literal, Optional

from tfcalc.architecture import Block, Stack, Weight
from tfcalc.config import ModelConfig
from tfcalc.errors import InputError

Split = Literal["rows", "cols", None]  # the dimension TP splits: 0 ("rows"), 1 ("cols") or none


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor as the real model stores it (fused ones whole) and how TP splits it."""

    name: str  # breakdown key; a fused tensor joins its parts' ("attn_qkv_weight" for Q, K and V)
    shape: tuple[int, ...]
    tp_split: Split
    per_block: bool  # one copy in every block that has it (an FSDP unit of its own), else in the root unit
    where: Literal["first", "last", "both", "block"]  # pipeline stage(s) holding it
    copies: int = 1  # stored copies per block: each expert's own tensor

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def chunk_rows(n: int, parts: int, index: int = 0) -> int:
    """Rows of block ``index`` when torch.chunk splits n rows into ``parts``: blocks of ⌈n/parts⌉, the
    last ones shorter or empty."""
    size = -(-n // parts)
    return max(0, min(size, n - index * size))


def check_tp(cfg: ModelConfig, tp: int) -> None:
    """The head and FFN splits must be even (see the module docstring), a cross-attention's as a
    self-attention's; a mixture of experts keeps its experts whole on every TP rank (replicated, not
    expert-parallel)."""
    if tp == 1:
        return
    for what, n in tp_split_widths(cfg):
        if n % tp:
            raise InputError(f"tp {tp} does not divide {what} ({n}) of {cfg.name}: each rank needs whole heads "
                             "and an equal share of the FFN and hidden widths")


@functools.lru_cache(maxsize=256)  # a search checks thousands of layouts of one model
def tp_split_widths(cfg: ModelConfig) -> tuple[tuple[str, int], ...]:
    """(name, width) of every width TP splits: each attention's (and cross-attention's) query and KV heads,
    each dense FFN's hidden width (a mixture's experts stay whole), and d_model."""
    out = []
    for _, block, _ in cfg.architecture.kinds():
        for a in (block.mixer, block.cross_attention):
            if a is not None:  # the widths the mixer says TP splits (tfcalc.architecture.mixer)
                out += a.tp_widths()
        if not block.is_moe:
            out.append(("d_ff", block.ffn.d_ff))
    return tuple(out + [("d_model", cfg.architecture.d_model)])


def module_tensors(cfg: ModelConfig) -> tuple[Tensor, ...]:
    """Every parameter tensor of the model as stored (see the module docstring), each block kind's once:
    a fold over ``cfg.architecture.weights()``, whose parts are joined where the model fuses them."""
    return _module_tensors(cfg)


@functools.lru_cache(maxsize=64)
def _module_tensors(cfg: ModelConfig) -> tuple[Tensor, ...]:
    placed = [p for p in cfg.architecture.weights() if not p.weight.tied_to]  # a tied one is its owner's
    out: list[Tensor] = []
    for (stack, block), run in itertools.groupby(placed, key=lambda p: (p.stack, p.where == "block")):
        if not block:
            out += _join([(p.weight, p.where) for p in run])
            continue
        # each block kind's parts joined apart: architecture.weights() lists a (name, shape) once over the kinds,
        # so Gemma 4's global q and k (other shapes than the local ones) would join the local qkv into one tensor
        seen: set[tuple[str, tuple[int, ...]]] = set()
        for s, b, _ in cfg.architecture.kinds():
            if s.name != stack:
                continue
            for t in _join([(w.named(s.prefix), "block") for w in b.weights() if not w.tied_to]):
                if (t.name, t.shape) not in seen:
                    seen.add((t.name, t.shape))
                    out.append(t)
    return tuple(out)


def unit(stack: Stack, block: Block) -> tuple[Tensor, ...]:
    """One block's stored tensors (an FSDP unit), named as module_tensors names them."""
    return _unit(stack.prefix, block)


@functools.lru_cache(maxsize=256)
def _unit(prefix: str, block: Block) -> tuple[Tensor, ...]:
    return tuple(_join([(w.named(prefix), "block") for w in block.weights()]))


def units(cfg: ModelConfig) -> list[tuple[tuple[Tensor, ...], int]]:
    """(block's stored tensors, blocks of that kind), every kind of block of the model."""
    return [(unit(s, b), n) for s, b, n in cfg.architecture.kinds()]


def _join(weights: list[tuple[Weight, str]]) -> list[Tensor]:
    """Tensors as stored: parts fused into one tensor (rows concatenated in order) become one, named
    ``<component>_<fused>_<weight|bias>`` (attn_qkv_weight); the others keep their breakdown key."""
    out: list[Tensor] = []
    index: dict[str, int] = {}
    for w, where in weights:
        if w.fused is None:
            out.append(Tensor(w.name, w.shape, w.tp, where == "block", where, w.copies))
            continue
        head, kind = w.name.rsplit("_", 1)  # attn_q, weight
        name = f"{head.rsplit('_', 1)[0]}_{w.fused}_{kind}"
        if name in index:
            t = out[index[name]]
            out[index[name]] = replace(t, shape=(t.shape[0] + w.shape[0], *t.shape[1:]))
        else:
            index[name] = len(out)
            out.append(Tensor(name, w.shape, w.tp, where == "block", where, w.copies))
    return out


def tp_local_shape(t: Tensor, tp: int, rank: int = 0) -> tuple[int, ...]:
    """The tensor's shape on TP rank ``rank`` (torch.chunk's block along the split dimension)."""
    if t.tp_split is None or tp == 1:
        return t.shape
    dim = 0 if t.tp_split == "rows" else 1
    shape = list(t.shape)
    shape[dim] = chunk_rows(shape[dim], tp, rank)
    return tuple(shape)


def fsdp_shard(shape: tuple[int, ...], dp: int) -> int:
    """Elements FSDP2 stores per rank for one tensor: its dim-0 block padded to ⌈n/dp⌉ rows."""
    if not shape:
        return 1
    return -(-shape[0] // dp) * math.prod(shape[1:])


def total_blocks(cfg: ModelConfig) -> int:
    """Blocks of every stack: an encoder-decoder's encoder and decoder both."""
    return sum(s.n_layer for s in cfg.architecture.stacks)


def stage_blocks(n_layer: int, pp: int) -> list[int]:
    """Blocks on each pipeline stage: contiguous runs, the first n_layer mod pp stages one more."""
    base, extra = divmod(n_layer, pp)
    return [base + (s < extra) for s in range(pp)]


SPLIT_COUNTS = ("embedding", "head")  # what --pp-split-counts may count as a block (the module docstring)
V_SHAPE = ("v",)  # DualPipeV's placement (the module docstring): Layout.stage_split under --schedule dualpipev


def stage_ranges(n_layer: int, pp: int, stage: int, virtual: int = 1, counted: tuple[str, ...] = ()) -> list[range]:
    """The blocks pipeline rank ``stage`` holds, a range per chunk. One chunk (V = 1): its contiguous run
    (stage_blocks). Interleaved, V chunks of c = n_layer / (pp·V) blocks (n_layer divisible:
    tfcalc.count.training.layout): chunk v of the rank is model chunk v·pp + stage, so rank 0 holds blocks [0, c),
    [pp·c, pp·c + c), ... -- the assignment of Megatron-LM's virtual pipeline (Narayanan et al. 2021, sec.
    2.2.2, Fig. 4) and of torch.distributed.pipelining's ScheduleInterleaved1F1B (stage index rank + v·pp).
    ``counted`` (any of SPLIT_COUNTS): the ends count as a block each (the module docstring); a chunk may
    then hold no block (the embedding's, the head's), its range empty. ``counted`` of ints instead (``--pp-layers``,
    V = 1): each stage's block count, given -- stage s holds the blocks after the first s stages' (Megatron-LM's
    --decoder-first/last-pipeline-num-layers, torchtitan's manual stage split by layer). ``V_SHAPE``: stages
    ``stage`` and 2·pp − 1 − stage of 2·pp (the module docstring; ``virtual`` is 1 there)."""
    if counted == V_SHAPE:
        cut = stage_blocks(n_layer, 2 * pp)
        return [range(sum(cut[:s]), sum(cut[:s + 1])) for s in (stage, 2 * pp - 1 - stage)]
    if counted and isinstance(counted[0], int):
        start = sum(counted[:stage])
        return [range(start, start + counted[stage])]
    if not counted:
        if virtual == 1:  # stage_blocks' runs in closed form: the first n_layer mod pp one block more
            base, extra = divmod(n_layer, pp)
            start = stage * base + min(stage, extra)
            return [range(start, start + base + (stage < extra))]
        c = n_layer // (pp * virtual)
        return [range((v * pp + stage) * c, (v * pp + stage + 1) * c) for v in range(virtual)]
    e = "embedding" in counted
    c = (n_layer + len(counted)) // (pp * virtual)  # divisible: tfcalc.count.training.layout_pipeline
    return [range(max(0, k * c - e), min(n_layer, (k + 1) * c - e)) for k in (v * pp + stage for v in range(virtual))]


@functools.lru_cache(maxsize=4096)
def stage_block_counts(n_layer: int, pp: int, virtual: int = 1, counted: tuple[str, ...] = ()) -> tuple[int, ...]:
    """Blocks each pipeline stage holds over its chunks (stage_ranges)."""
    return tuple(sum(map(len, stage_ranges(n_layer, pp, s, virtual, counted))) for s in range(pp))


def stage_kinds(cfg: ModelConfig, pp: int, stage: int, virtual: int = 1,
                counted: tuple[str, ...] = ()) -> list[tuple[Block, tuple[Tensor, ...], int]]:
    """(block, its stored tensors, blocks of that kind) on pipeline stage ``stage``: its blocks
    (``stage_ranges``; encoder first), counted in closed form (a kind may come once per chunk)."""
    return [(b, unit(s, b), n) for r in stage_ranges(total_blocks(cfg), pp, stage, virtual, counted)
            for s, b, n in cfg.architecture.kinds_in(r.start, r.stop)]


def stage_tensors(cfg: ModelConfig, pp: int, stage: int, virtual: int = 1,
                  counted: tuple[str, ...] = ()) -> list[tuple[Tensor, int]]:
    """(tensor, copies) held by pipeline stage ``stage``: its blocks' tensors and its end's tensors."""
    return list(_stage_tensors(cfg, pp, stage, virtual, counted))


@functools.lru_cache(maxsize=16384)  # a plan's search asks for the same stages of many layouts
def _stage_tensors(cfg: ModelConfig, pp: int, stage: int, virtual: int = 1,
                   counted: tuple[str, ...] = ()) -> tuple[tuple[Tensor, int], ...]:
    first, last = stage == 0, stage == (0 if counted == V_SHAPE else pp - 1)
    held: dict[tuple, int] = {}  # keyed by (name, shape): cheaper to hash than the dataclass
    for _, tensors, n in stage_kinds(cfg, pp, stage, virtual, counted):
        for t in tensors:
            held[t.name, t.shape] = held.get((t.name, t.shape), 0) + t.copies * n
    out = []
    for t in module_tensors(cfg):
        if t.per_block:
            copies = held.get((t.name, t.shape), 0)
        else:
            copies = int((t.where in ("first", "both") and first) or (t.where in ("last", "both") and last))
        if copies:
            out.append((t, copies))
    return tuple(out)


def tied_stage_copy(cfg: ModelConfig, pp: int, counted: tuple = ()) -> Optional[Tensor]:
    """The tied embedding that the first and last stages both hold when pp > 1, else None (and None under
    V_SHAPE: both ends on the first rank, one tensor)."""
    if pp == 1 or counted == V_SHAPE:
        return None
    return next((t for t in module_tensors(cfg) if t.where == "both"), None)
