"""Storage sizes of the dtypes tfcalc reports, in bits per element (pure arithmetic, no torch)."""

from __future__ import annotations

# tf32 is a matmul mode, not a storage format: its tensors are stored as fp32 (4 bytes).
# int4 packs two elements per byte.
BITS_PER_ELEMENT = {"fp32": 32, "tf32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
DTYPES = tuple(BITS_PER_ELEMENT)


def weight_bytes(n_elements: int, dtype: str) -> int:
    """Bytes to store n elements of dtype, rounded up to whole bytes."""
    return -(-n_elements * BITS_PER_ELEMENT[dtype] // 8)
