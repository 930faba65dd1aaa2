"""QLoRA's frozen base (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs", arXiv 2305.14314,
sec. 3): LoRA (tfcalc.count.model.lora) over a base whose block linears are stored in 4-bit NormalFloat (NF4) with
double quantization, as bitsandbytes' Linear4bit(quant_type="nf4", compress_statistics=True) holds them (the
storage of transformers' BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
bnb_4bit_use_double_quant=True)). Pure arithmetic, no torch.

1. One weight tensor of n elements (bitsandbytes/functional.py, quantize_4bit and its nested QuantState):
   the packed values, two a byte, ⌈n/2⌉; one absmax a block of 64, quantized to 8 bits, ⌈n/64⌉ bytes; those
   absmaxes' own fp32 absmax a block of 256, 4·⌈⌈n/64⌉/256⌉; the NF4 code (16 fp32), the nested 8-bit code (256
   fp32) and the nested offset (one fp32): 4·(16 + 256 + 1) bytes a tensor. Per parameter 4 + 8/64 + 32/(64·256)
   = 4.127 bits -- the paper's double quantization, which takes the constants from 32/64 = 0.5 bits a
   parameter to 8/64 + 32/(64·256) = 0.127 (sec. 3). Checked against bitsandbytes' QuantState where it is installed.
2. Which tensors: each block linear (q, k, v, o, gate, up, down), one tensor each as the Hugging Face modules
   store them (transformers quantizes every nn.Linear but the output layer); embeddings, norms, biases and the
   LM head stay in --dtype. (PEFT's prepare_model_for_kbit_training casts those to fp32 besides; not counted.)
3. A linear's forward and input gradient dequantize its weight into the compute dtype
   (bitsandbytes/autograd/_functions.py, MatMul4Bit): one such temporary, the largest linear's, is alive beside
   the activations. MatMul4Bit keeps only the quantized weight for the backward, never its input: the
   activations are LoRA's (tfcalc.count.model.lora, step 3b).
"""

from __future__ import annotations

import math

BLOCK = 64  # weights per absmax
NESTED_BLOCK = 256  # absmaxes per fp32 absmax (double quantization)
FP32 = 4
CODES = NF4_CODE, NESTED_CODE, OFFSET = 16, 256, 1  # fp32 values a tensor keeps beside its blocks
BASE_DTYPES = ("nf4",)


def nf4_bytes(n: int) -> int:
    """Step 1: bytes of one NF4 tensor of n elements, double-quantized."""
    blocks = math.ceil(n / BLOCK)
    return math.ceil(n / 2) + blocks + FP32 * math.ceil(blocks / NESTED_BLOCK) + FP32 * sum(CODES)


def base_bytes(linears: list[tuple[int, int]], params: int, dtype_bytes: int) -> int:
    """Steps 1-2: the frozen base of ``params`` parameters whose block linears, (elements, layers) each, are NF4,
    the rest in the dtype."""
    stored = sum(nf4_bytes(n) * layers for n, layers in linears)
    return stored + dtype_bytes * (params - sum(n * layers for n, layers in linears))


def dequantized_bytes(linears: list[tuple[int, int]], dtype_bytes: int) -> int:
    """Step 3: the largest block linear's weight dequantized into the compute dtype."""
    return dtype_bytes * max(n for n, _ in linears)
