"""Storage sizes of the dtypes tfcalc reports, in bits per element, and the bytes of one activation
element (pure arithmetic, no torch)."""

from __future__ import annotations

from typing import Optional

from tfcalc.errors import InputError as ConfigError, shown

# tf32 is a matmul mode, not a storage format: its tensors are stored as fp32 (4 bytes).
# int4 packs two elements per byte.
BITS_PER_ELEMENT = {"fp32": 32, "tf32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
DTYPES = tuple(BITS_PER_ELEMENT)


def weight_bytes(n_elements: int, dtype: str) -> int:
    """Bytes to store n elements of dtype, rounded up to whole bytes."""
    return -(-n_elements * BITS_PER_ELEMENT[dtype] // 8)


def check_dtype(dtype: str) -> None:
    if not isinstance(dtype, str) or dtype not in BITS_PER_ELEMENT:  # a list is unhashable: checked first
        raise ConfigError(f"unknown dtype {shown(dtype)}; choose one of {', '.join(DTYPES)}")


def activation_dtype(dtype: str) -> str:
    """The dtype activations are kept in for weights in ``dtype``: its own for fp32/tf32/bf16/fp16, bf16 for the
    weight formats fp8, int8 and int4 (see activation_element_bytes)."""
    check_dtype(dtype)
    return dtype if dtype in ("fp32", "tf32", "bf16", "fp16") else "bf16"


def state_dtype(declared: Optional[str], kv: str, dtype: str) -> str:
    """The dtype a generation-state tensor is priced in (tfcalc.architecture.mixer.StateTensor.dtype): None, the
    cache dtype ``kv`` (``--kv-dtype``: K and V); "model", the model's activation dtype whatever the KV cache's (a
    convolution's ring: what the runtime and transformers allocate it in); else the dtype declared (fp32: a
    recurrent state)."""
    if declared is None:
        return kv
    return activation_dtype(dtype) if declared == "model" else declared


def activation_element_bytes(dtype: str) -> int:
    """Bytes of one activation element: the dtype's own size for fp32/tf32/bf16/fp16. fp8, int8 and int4
    are weight formats here: their matmuls dequantize and compute in bf16, so activations are 2 bytes."""
    check_dtype(dtype)
    return max(2, BITS_PER_ELEMENT[dtype] // 8)
