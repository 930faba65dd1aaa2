"""How the real model's parameter tensors are split across ranks: pure arithmetic, no torch.

The tensors are those tfcalc.model builds (``module_tensors``), fused where the module fuses them: Q, K
and V are one ``attn.qkv`` tensor (rows [Q | K | V]) and a gated FFN's gate and up projections one
``ffn.up`` tensor (rows [gate | up]). Splitting a fused tensor into contiguous row blocks would hand
rank 0 all of Q and rank 1 all of K and V, so for tensor parallelism the rows are first interleaved by
rank -- [Q₀ K₀ V₀ | Q₁ K₁ V₁ | ...], [gate₀ up₀ | gate₁ up₁ | ...] -- and rank r's contiguous block is
then its own heads' Q, K and V (its own FFN columns' gate and up): every part is split evenly, so
n_head, n_kv_head and d_ff must be multiples of tp (``check_tp``). tfcalc.measure.parallelize does
exactly this interleaving before sharding the real module.

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
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal, Optional

from tfcalc.config import ModelConfig
from tfcalc.errors import InputError

Split = Literal["rows", "cols", None]  # the dimension TP splits: 0 ("rows"), 1 ("cols") or none


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor of the real model (a fused one whole) and how TP splits it."""

    name: str  # module path as tfcalc.model names it, block index written as {i}
    shape: tuple[int, ...]
    tp_split: Split
    per_block: bool  # one copy in every block (an FSDP unit of its own), else in the root unit
    where: Literal["first", "last", "both", "block"]  # pipeline stage(s) holding it

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def chunk_rows(n: int, parts: int, index: int = 0) -> int:
    """Rows of block ``index`` when torch.chunk splits n rows into ``parts``: blocks of ⌈n/parts⌉, the
    last ones shorter or empty."""
    size = -(-n // parts)
    return max(0, min(size, n - index * size))


def check_supported(cfg: ModelConfig) -> None:
    """Parallel plans cover dense decoder and encoder models."""
    if cfg.arch == "encoder-decoder":
        raise InputError(f"{cfg.name}: parallel plans cover decoder and encoder models, not encoder-decoders")
    if cfg.n_expert:
        raise InputError(f"{cfg.name}: parallel plans cover dense models; expert parallelism is not modelled")


def check_tp(cfg: ModelConfig, tp: int) -> None:
    """The head and FFN splits must be even (see the module docstring)."""
    for what, n in (("n_head", cfg.n_head), ("n_kv_head", cfg.kv_heads), ("d_ff", cfg.ffn_dim),
                    ("d_model", cfg.d_model)):
        if n % tp:
            raise InputError(f"tp {tp} does not divide {what} ({n}) of {cfg.name}: each rank needs whole heads "
                             "and an equal share of the FFN and hidden widths")


def module_tensors(cfg: ModelConfig) -> tuple[Tensor, ...]:
    """The parameter tensors of tfcalc.model's Transformer (see the module docstring), blocks once."""
    check_supported(cfg)
    return _module_tensors(cfg)


@functools.lru_cache(maxsize=64)
def _module_tensors(cfg: ModelConfig) -> tuple[Tensor, ...]:
    d, f, V, q, k = cfg.d_model, cfg.ffn_dim, cfg.vocab_size, cfg.q_dim, cfg.kv_dim
    tied = cfg.lm_head and cfg.tie_embeddings
    out: list[Tensor] = []

    def add(name, shape, split=None, block=False, where="first", present=True):
        if present:
            out.append(Tensor(name, shape, split, block, "block" if block else where))

    def norm(name, block=False, where="first", present=True):
        add(f"{name}.weight", (d,), None, block, where, present)
        add(f"{name}.bias", (d,), None, block, where, present and cfg.norm_has_bias)

    add("tok_emb.weight", (V, d), "rows" if tied else "cols", where="both" if tied else "first")
    add("pos_emb.weight", (cfg.max_seq_len, d), present=cfg.pos_encoding == "learned")
    add("type_emb.weight", (cfg.type_vocab_size, d), present=cfg.type_vocab_size > 0)
    norm("emb_norm", present=cfg.embedding_norm)
    b = "blocks.{i}."
    norm(b + "attn_norm", block=True)
    add(b + "attn.qkv.weight", (q + 2 * k, d), "rows", True)
    add(b + "attn.qkv.bias", (q + 2 * k,), "rows", True, present=cfg.attn_bias)
    add(b + "attn.out.weight", (d, q), "cols", True)
    add(b + "attn.out.bias", (d,), None, True, present=cfg.attn_bias)
    norm(b + "ffn_norm", block=True)
    width = 2 * f if cfg.gated_ffn else f
    add(b + "ffn.up.weight", (width, d), "rows", True)
    add(b + "ffn.up.bias", (width,), "rows", True, present=cfg.ffn_bias)
    add(b + "ffn.down.weight", (d, f), "cols", True)
    add(b + "ffn.down.bias", (d,), None, True, present=cfg.ffn_bias)
    norm("final_norm", where="last", present=cfg.final_norm)
    add("pooler.weight", (d, d), where="last", present=cfg.pooler)
    add("pooler.bias", (d,), where="last", present=cfg.pooler)
    add("lm_head.weight", (V, d), "rows", where="last", present=cfg.lm_head and not tied)
    return tuple(out)


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


def stage_blocks(n_layer: int, pp: int) -> list[int]:
    """Blocks on each pipeline stage: contiguous runs, the first n_layer mod pp stages one more."""
    base, extra = divmod(n_layer, pp)
    return [base + (s < extra) for s in range(pp)]


def stage_tensors(cfg: ModelConfig, pp: int, stage: int) -> list[tuple[Tensor, int]]:
    """(tensor, copies) held by pipeline stage ``stage``: its blocks' tensors and its end's tensors."""
    blocks = stage_blocks(cfg.n_layer, pp)[stage]
    first, last = stage == 0, stage == pp - 1
    out = []
    for t in module_tensors(cfg):
        if t.per_block:
            copies = blocks
        else:
            copies = int((t.where in ("first", "both") and first) or (t.where in ("last", "both") and last))
        if copies:
            out.append((t, copies))
    return out


def tied_stage_copy(cfg: ModelConfig, pp: int) -> Optional[Tensor]:
    """The tied embedding that the first and last stages both hold when pp > 1, else None."""
    if pp == 1:
        return None
    return next((t for t in module_tensors(cfg) if t.where == "both"), None)
