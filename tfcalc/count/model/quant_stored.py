"""Bytes of the weights as a quantized checkpoint stores them: the config's ``stored_quant`` fields (read
from config.json's ``quantization_config`` by tfcalc.hf_config.quantization). Pure arithmetic, no torch.

Which tensors: the block matrices and the LM head (tfcalc.config_quant.QUANTIZABLE: the nn.Linear modules
transformers' quantizers replace), less those the config keeps (``stored_quant_keep``: its
``modules_to_not_convert`` or ``ignore`` list). Embeddings, norms, routers and biases stay in the
checkpoint's dtype (bf16), as do the kept matrices.

A quantized matrix of shape (out, in) stores:
- its values, ``bits`` each, packed: ceil(out · in · bits / 8) bytes (int4: two per byte; compressed-tensors'
  pack-quantized packs eight into an int32, the same bytes when in is a multiple of 8);
- its scales in ``stored_quant_scale_dtype``: one per tensor, one per output row (channel), one per group of
  ``g`` weights along the input dim (out · ceil(in / g): GPTQ/AWQ's ``scales``, compressed-tensors'
  ``weight_scale``), or one per (b0, b1) tile (ceil(out / b0) · ceil(in / b1): DeepSeek-V3's fp32
  ``weight_scale_inv``, transformers' integrations/finegrained_fp8.py allocates the same shape);
- with zero points (asymmetric: GPTQ/AWQ's ``qzeros``, compressed-tensors' ``weight_zero_point``), one per
  scale, ``bits`` each, packed.
A group must divide the input width of every quantized matrix (GPTQ's and compressed-tensors' group
strategy); a width it does not divide is refused in one line
(tfcalc.config_quant.validate_stored_groups). Not counted: compressed-tensors' two-integer
``weight_shape`` beside each packed matrix (8 to 16 bytes a matrix: under 1 MB for Kimi-K2-Thinking's
69,120 expert matrices).

Hand-worked, DeepSeek-V3 (fp8 e4m3, 128 × 128 blocks, fp32 scales; the LM head, embedding, norms and routers
in bf16): 61 layers of MLA (q_a 1536×7168, q_b 24576×1536, kv_a 576×7168, kv_b 32768×512, o 7168×16384),
3 dense FFNs (3 × 18432×7168) and 58 MoE layers of 256 + 1 experts (3 × 2048×7168 each) hold
669,065,609,216 fp8 weights; their 128×128 tiles (the 576-row kv_a rounds up to 5 tile rows) hold
40,838,232 fp32 scales (163,352,928 bytes); the embedding and head (2 × 129280×7168), norms and routers
(58 × 256×7168), 1,960,795,136 values in bf16 (3,921,590,272 bytes): 673,150,552,416 bytes in all, the
model transformers builds (tests/count/test_quant_stored.py derives it again and checks transformers' FP8
modules on meta). The published checkpoint adds the MTP module (layer 61, its own copies of the embedding
and head): 688,586,727,753 bytes (model.safetensors.index.json, metadata.total_size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.config_quant import QUANTIZABLE, kept
from tfcalc.count.model.dtypes import BITS_PER_ELEMENT, weight_bytes
from tfcalc.count.model.params import ParamEntry

REST_DTYPE = "bf16"  # what a quantized checkpoint stores its other tensors in (every one tfcalc reads)


@dataclass(frozen=True)
class StoredQuant:
    """The stored format of a checkpoint's quantized matrices (the config's stored_quant fields)."""

    dtype: str  # fp8, int8, int4
    scales: str  # tensor, channel, group, block
    scale_dtype: str
    group: Optional[int] = None
    block: Optional[tuple[int, int]] = None
    zero_point: bool = False
    keep: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        per = {"tensor": "one scale per matrix", "channel": "one scale per row",
               "group": f"group {self.group}", "block": f"{self.block[0]}×{self.block[1]} blocks" if self.block
               else ""}[self.scales]
        zeros = f", {self.dtype} zero points" if self.zero_point else ""
        return f"{self.dtype} as stored ({per}, {self.scale_dtype} scales{zeros}; rest {REST_DTYPE})"

    def quantizes(self, entry: ParamEntry) -> bool:
        return entry.component in QUANTIZABLE and entry.component not in self.keep and len(entry.shape) == 2

    def scale_count(self, rows: int, cols: int) -> int:
        """Scales (and zero points) of one (rows, cols) matrix."""
        if self.scales == "tensor":
            return 1
        if self.scales == "channel":
            return rows
        if self.scales == "group":
            return rows * -(-cols // self.group)
        return -(-rows // self.block[0]) * -(-cols // self.block[1])


def stored_quant(cfg: ModelConfig) -> Optional[StoredQuant]:
    """The config's stored format, checked against its matrices' widths; None when it stores none."""
    if cfg.stored_quant is None:
        return None
    block = tuple(cfg.stored_quant_block) if cfg.stored_quant_block else None
    sq = StoredQuant(cfg.stored_quant, cfg.stored_quant_scales, cfg.stored_quant_scale_dtype, cfg.stored_quant_group,
                     block, bool(cfg.stored_quant_zero_point), kept(cfg))
    return sq


def entry_parts(entry: ParamEntry, sq: StoredQuant) -> tuple[int, int, int]:
    """(values, scales, zero points) bytes of one ParamEntry (all its copies) as stored; 0 when tied."""
    n = entry.total
    if n == 0 or not sq.quantizes(entry):
        return weight_bytes(n, REST_DTYPE), 0, 0
    rows, cols = entry.shape
    bits = BITS_PER_ELEMENT[sq.dtype]
    scales = sq.scale_count(rows, cols)
    data = -(-rows * cols * bits // 8) * entry.copies  # each matrix packed on its own
    zeros = -(-scales * bits // 8) * entry.copies if sq.zero_point else 0
    return data, weight_bytes(scales * entry.copies, sq.scale_dtype), zeros
