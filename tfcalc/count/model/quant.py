"""Bytes of the weights in a storage format: plain (fp32, bf16, fp16) or weight-only quantized (int8,
int4, fp8) with scales and zero points. Pure arithmetic, no torch.

Which tensors are quantized: the matrices of the blocks -- attention and cross-attention Q, K, V, O, and
the FFN (or every expert's) gate, up and down -- as GPTQ (Frantar et al. 2023) and AWQ (Lin et al. 2024)
do. Everything else stays in ``rest_dtype`` (bf16 by default): embeddings, norms, biases, a MoE's
router and the LM head (both methods leave the head unquantized; ``quantize_lm_head`` to change that).

A quantized matrix of shape (out, in) stores, per group of ``group_size`` consecutive weights along the
input dimension (one group per row when ``group_size`` is None: per-channel, as LLM.int8 and
SmoothQuant do for int8):
- the weights themselves, ``bits`` each, packed (two int4 per byte);
- one scale in ``scale_dtype`` (fp16, as GPTQ/AWQ checkpoints store them);
- with ``zero_point`` (asymmetric quantization), one zero point of ``bits`` bits, packed like the weights
  (GPTQ/AWQ's ``qzeros``).
Groups per row = ceil(in / group_size). So int4 with group 128, fp16 scales and int4 zero points costs
4 + 16/128 + 4/128 = 4.15625 bits per weight.

Hand-worked, Llama 2 7B, int4, group 128, fp16 scales, int4 zero points, the rest in bf16: the block
matrices hold 32 · (4·4096² + 3·4096·11008) = 6,476,005,376 weights -> 3,238,002,688 bytes; their
50,593,792 groups add 101,187,584 bytes of scales and 25,296,896 of zero points; embedding, LM head and
norms, 262,410,240 parameters in bf16, 524,820,480 bytes. Total 3,889,307,648 bytes (tests/count/test_roofline.py).

A checkpoint may store its routed experts in a format of its own (``expert_format``, the config's): gpt-oss
stores them as MXFP4 (OCP "Microscaling Formats (MX) Specification" v1.0, sec. 5.3: blocks of 32 FP4
E2M1 values sharing one 8-bit E8M0 scale, (32·4 + 8) / 32 = 4.25 bits per value; the blocks run along
the input dimension, as the checkpoint's ``*_blocks`` (E, out, in/32, 16) and ``*_scales`` (E, out,
in/32) hold them). Under a plain format the experts' weight matrices are then counted as stored and
everything else (their biases, the router, attention, embeddings, head) in that format's dtype;
gpt-oss-120b in bf16 and MXFP4: 36·128·3·2880² = 114,661,785,600 expert weights × 4.25 bits =
60,914,073,600 bytes, and 2,167,371,072 other parameters × 2 = 4,334,742,144 bytes, 65,248,815,744 in
all. A quantized --dtype quantizes every matrix alike, the experts too (a what-if, not the checkpoint).

A quantized checkpoint (config.json's ``quantization_config``: FP8 block-wise, compressed-tensors,
AWQ/GPTQ; the config's ``stored_quant`` fields) is counted the same way: under a plain format (the default
bf16) its matrices are counted as stored, with their scales and zero points (tfcalc.count.model.quant_stored),
and everything else in that format's dtype; so no command prints a bf16 figure for a quantized checkpoint
unless a quantized --dtype asks for a what-if.

Compute: int8 and int4 weights are dequantized and multiplied in bf16 (weight-only quantization, the
GPTQ/AWQ kernels), so activations are bf16 and the bf16 peak applies; fp8 runs at the fp8 peak where the
device has one (``compute_dtype``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.dtypes import BITS_PER_ELEMENT, DTYPES, weight_bytes
from tfcalc.count.model.params import ParamEntry, param_entries
from tfcalc.count.model.quant_stored import StoredQuant, entry_parts, stored_quant
from tfcalc.errors import InputError

QUANTIZED = ("int8", "int4", "fp8")
MXFP4_BLOCK, MXFP4_SCALE_BITS, MXFP4_VALUE_BITS = 32, 8, 4  # OCP MX v1.0: 32 E2M1 values per E8M0 scale
PLAIN = ("fp32", "tf32", "bf16", "fp16")
_MATRIX_GROUPS = ("attention", "cross_attention", "ffn")


@dataclass(frozen=True)
class WeightFormat:
    dtype: str = "bf16"  # storage of the block matrices
    group_size: Optional[int] = None  # weights per scale along the input dim; None: one scale per row
    zero_point: bool = False  # asymmetric: a zero point per group, packed in `dtype`'s bits
    scale_dtype: str = "fp16"
    rest_dtype: str = "bf16"  # everything that is not quantized
    quantize_lm_head: bool = False

    def __post_init__(self) -> None:
        for name in ("dtype", "scale_dtype", "rest_dtype"):
            if getattr(self, name) not in DTYPES:
                raise InputError(f"unknown dtype '{getattr(self, name)}'; choose one of {', '.join(DTYPES)}")
        if self.group_size is not None and (isinstance(self.group_size, bool) or self.group_size < 1):
            raise InputError(f"group size must be a positive integer; got {self.group_size!r}")
        if not self.quantized and (self.group_size is not None or self.zero_point):
            raise InputError(f"{self.dtype} is not quantized: a group size or zero points apply to "
                             f"{', '.join(QUANTIZED)} only")

    @property
    def quantized(self) -> bool:
        return self.dtype in QUANTIZED

    @property
    def compute_dtype(self) -> str:
        """The dtype the matmuls run in (see the module docstring)."""
        return self.dtype if self.dtype in PLAIN + ("fp8",) else "bf16"

    @property
    def label(self) -> str:
        if not self.quantized:
            return self.dtype
        group = f"group {self.group_size}" if self.group_size else "per-channel"
        zeros = f", {self.dtype} zero points" if self.zero_point else ""
        return f"{self.dtype} ({group}, {self.scale_dtype} scales{zeros}; rest {self.rest_dtype})"


def plain(dtype: str) -> WeightFormat:
    """Every weight in one dtype, nothing quantized (the format of `tfcalc memory --dtype bf16`)."""
    return WeightFormat(dtype=dtype, rest_dtype=dtype)


def weight_format(dtype: str, group_size: Optional[int] = None, zero_point: Optional[bool] = None) -> WeightFormat:
    """The format a --dtype (and --group-size) means: a plain dtype stores everything in it; int4 defaults
    to group 128 with zero points (GPTQ/AWQ's usual checkpoint), int8 and fp8 to per-channel scales."""
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int)):
        raise InputError(f"--group-size must be a whole number of weights; got {type(group_size).__name__} "
                         f"{str(group_size)[:40]}")
    if dtype not in QUANTIZED:
        if group_size is not None:
            raise InputError(f"--group-size applies to {', '.join(QUANTIZED)} weights, not {dtype}")
        return plain(dtype)
    if dtype == "int4":
        group_size = 128 if group_size is None else group_size
        zero_point = True if zero_point is None else zero_point
    return WeightFormat(dtype=dtype, group_size=group_size, zero_point=bool(zero_point))


def default_kv_dtype(fmt: WeightFormat) -> str:
    """The KV cache's dtype unless told: the weights' for a plain format; bf16 beside quantized weights
    (their activations, and so K and V, are bf16; vLLM's kv_cache_dtype "auto" does the same)."""
    return fmt.dtype if not fmt.quantized else "bf16"


def is_quantized(entry: ParamEntry, fmt: WeightFormat) -> bool:
    """Whether this parameter tensor is stored in the quantized format."""
    if not fmt.quantized or len(entry.shape) != 2:
        return False
    if entry.group == "lm_head":
        return fmt.quantize_lm_head
    return entry.group in _MATRIX_GROUPS and not entry.component.endswith("router_weight")


@dataclass(frozen=True)
class EntryBytes:
    """Bytes of one parameter tensor (all its copies) in a format, by part."""

    data: int
    scales: int
    zero_points: int

    @property
    def total(self) -> int:
        return self.data + self.scales + self.zero_points


def stored_mxfp4(cfg: ModelConfig, fmt: WeightFormat) -> bool:
    """Whether the routed experts' matrices are counted as the checkpoint stores them, MXFP4 (see the
    module docstring): the config says so and the format is plain."""
    moe = cfg.architecture.moe()  # the routed experts' stored format, as the description holds it
    return moe is not None and moe.weight_format == "mxfp4" and not fmt.quantized


def is_expert_matrix(entry: ParamEntry) -> bool:
    """A routed expert's weight matrix (not a bias, not the shared expert's, not the router)."""
    name = entry.component.removeprefix("encoder_")
    return name.startswith("expert_ffn_") and name.endswith("_weight") and len(entry.shape) == 2


def stored_format(cfg: ModelConfig, fmt: WeightFormat) -> bool | StoredQuant | None:
    """How the checkpoint's own format applies under fmt: True for MXFP4 experts (stored_mxfp4), the
    checkpoint's quantization (StoredQuant) under a plain format, else None (entry_bytes' ``stored``)."""
    if stored_mxfp4(cfg, fmt):
        return True
    return None if fmt.quantized else stored_quant(cfg)


def entry_bytes(entry: ParamEntry, fmt: WeightFormat, mxfp4: bool | StoredQuant | None = False) -> EntryBytes:
    """One ParamEntry's bytes (0 for a tied tensor: its storage is counted where it lives); mxfp4: the
    routed experts' matrices as MXFP4 (stored_mxfp4); a StoredQuant: the checkpoint's quantized matrices as
    stored and the rest in fmt's dtype (stored_format)."""
    if isinstance(mxfp4, StoredQuant):
        if mxfp4.quantizes(entry):
            return EntryBytes(*entry_parts(entry, mxfp4))
        return EntryBytes(weight_bytes(entry.total, fmt.rest_dtype), 0, 0)
    n = entry.total
    if mxfp4 and is_expert_matrix(entry) and n:
        rows, cols = entry.shape
        blocks = rows * -(-cols // MXFP4_BLOCK) * entry.copies
        return EntryBytes(n * MXFP4_VALUE_BITS // 8, blocks * MXFP4_SCALE_BITS // 8, 0)
    if not is_quantized(entry, fmt) or n == 0:
        return EntryBytes(weight_bytes(n, fmt.rest_dtype), 0, 0)
    rows, cols = entry.shape
    per_row = 1 if fmt.group_size is None else -(-cols // fmt.group_size)
    groups = rows * per_row * entry.copies
    scales = weight_bytes(groups, fmt.scale_dtype)
    zeros = weight_bytes(groups, fmt.dtype) if fmt.zero_point else 0
    data = weight_bytes(entry.per_copy, fmt.dtype) * entry.copies  # each matrix packed on its own
    return EntryBytes(data, scales, zeros)


def breakdown(cfg: ModelConfig, fmt: WeightFormat) -> dict[str, int]:
    """{quantized, scales, zero_points, unquantized}: bytes of the weights in this format; with experts
    stored as MXFP4 (stored_mxfp4), {mxfp4_experts, mxfp4_scales, unquantized} instead."""
    stored = stored_format(cfg, fmt)
    mxfp4 = stored is True
    keys = ("mxfp4_experts", "mxfp4_scales", "unquantized") if mxfp4 else ("quantized", "scales", "zero_points",
                                                                             "unquantized")
    out = dict.fromkeys(keys, 0)
    for entry in param_entries(cfg):
        b = entry_bytes(entry, fmt, stored)
        if mxfp4 and is_expert_matrix(entry):
            out["mxfp4_experts"] += b.data
            out["mxfp4_scales"] += b.scales
            continue
        quantized = stored.quantizes(entry) if isinstance(stored, StoredQuant) else is_quantized(entry, fmt)
        key = "quantized" if quantized else "unquantized"
        out[key] += b.data
        out["scales" if "scales" in out else "unquantized"] += b.scales
        out["zero_points" if "zero_points" in out else "unquantized"] += b.zero_points
    return out


def format_label(cfg: ModelConfig, fmt: WeightFormat) -> str:
    """The format's label, with the checkpoint's stored format when it applies."""
    stored = stored_format(cfg, fmt)
    if isinstance(stored, StoredQuant):
        return stored.label if fmt.dtype == "bf16" else f"{stored.label.split(';')[0]}; rest {fmt.dtype})"
    return f"{fmt.label}, routed experts MXFP4 (4.25 bits per weight)" if stored else fmt.label


def weights_bytes(cfg: ModelConfig, fmt: WeightFormat) -> int:
    """All the weights in this format: for a plain format, params × bytes (tfcalc.count.model.memory)."""
    return sum(breakdown(cfg, fmt).values())


def bits_per_weight(fmt: WeightFormat) -> float:
    """Storage bits of one quantized weight with its share of scale and zero point (a plain format: its
    bits), for rows a whole number of groups long."""
    bits = BITS_PER_ELEMENT[fmt.dtype]
    if not fmt.quantized or fmt.group_size is None:
        return float(bits)
    extra = BITS_PER_ELEMENT[fmt.scale_dtype] + (bits if fmt.zero_point else 0)
    return bits + extra / fmt.group_size
