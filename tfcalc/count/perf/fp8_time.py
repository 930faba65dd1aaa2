"""The time side of FP8 matmuls (``plan --compute-dtype fp8``, ``infer --dtype fp8``): the FP8 GEMMs'
own achievable ceiling and the casts that feed them. Pure arithmetic. (Which GEMMs run in FP8 and the
memory the recipe adds: tfcalc.count.training.fp8.)

1. Ceiling: an FP8 GEMM reaches a smaller share of its datasheet peak than a bf16 one. Stas Bekman,
   "Machine Learning Engineering", compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS
   comparison table", FP8 (float8_e4m3fn) rows measured with mamf-finder.py: H100 SXM 1402.6 of 1979
   TFLOP/s (0.709), H200 SXM 1453.4 (0.734), GH200 1535.0 (0.776), B200 3432.5 of 4500 (0.763) -- against
   bf16 0.80-0.87 on the same table. ``PerfSpec.fp8_ceiling`` (tfcalc.count.perf.hardware) holds them; the
   same shape model as bf16 (tfcalc.count.perf.gemm: tiles, waves, the main loop) runs under it.
2. Casts, training (Transformer Engine's delayed scaling, tfcalc.count.training.fp8's recipe): before each FP8 GEMM
   its 16-bit inputs are cast to FP8 by a memory-bound kernel that reads the tensor once and writes it
   twice in one byte -- row-major, and transposed (column-major) for the backward GEMM that needs it
   (Hopper's FP8 tensor cores take only the TN layout: Transformer Engine's fused cast_transpose; torchao's
   float8 roofline, torchao/testing/float8/roofline_utils.py, "read in bf16, write twice in float8
   (row-major and col-major)"). The amax comes from the history (delayed scaling), computed inside the
   cast kernel: no extra pass. Per FP8 linear (m, k) @ (k, n) and micro-batch, in a bytes e:
   forward: the input (e + 2)·m·k and the weight (e + 2)·k·n; backward: the output gradient (e + 2)·m·n;
   three kernels (Transformer Engine recasts the weight each micro-batch unless told it is the first one,
   ``is_first_microbatch``: every micro-batch's weight cast is counted). Full recompute runs the
   forward's casts again.
3. Serving (``infer --dtype fp8``, TensorRT-LLM's FP8 recipe): weights are stored in FP8 (no cast); each
   FP8 GEMM's 16-bit input is quantized with a static scale from calibration (tensorrt_llm/quantization/
   layers.py, FP8Linear: ``quantize(x, activation_scaling_factor, 'fp8')`` before the matmul), a
   quantize layer TensorRT fuses into the kernel that produces the tensor (TensorRT Developer Guide,
   "Working with Quantized Types", Q/DQ fusion): that kernel writes one byte per element instead of two,
   no pass of its own -- counted as no cost (the byte saved is not taken). Attention's score products and
   the LM head stay in 16 bits at the 16-bit peak (the LM head is not quantized, tfcalc.count.model.quant; the
   fused attention of TensorRT-LLM v0.5-0.8 ran in fp16 on FP8 KV caches, its FP8 context attention
   came later).
4. MFU: model FLOPs over the --dtype (bf16) peak, the convention of torchtitan (torchtitan/tools/utils.py,
   ``get_peak_flops``: "hardcoded BF16 type peak flops", used for MFU whether float8 is enabled or not).
   plan also prints the share of the FP8 peak (``step.mfu_fp8_peak``), so the figure is never ambiguous.

Worked example (tests/count/test_fp8_time.py): one FP8 linear of Llama 2 7B's up projection, m = 4096
tokens, k = 4096, n = 11008, bf16 (e = 2): forward 4·4096·4096 + 4·4096·11008 = 247,463,936 bytes,
backward 4·4096·11008 = 180,355,072 bytes; at 0.85 of an H100's 3.35 TB/s, 86.9 µs + 63.3 µs.
"""

from __future__ import annotations

CAST_WRITES = 2  # one byte row-major, one transposed (step 2)
CAST_KERNELS_FORWARD = 2  # the input's and the weight's
CAST_KERNELS_BACKWARD = 1  # the output gradient's


def training_cast_bytes(m: int, k: int, n: int, act_bytes: int, weight_bytes: int) -> tuple[int, int]:
    """Step 2: (forward, backward) bytes the casts of one FP8 linear move per micro-batch."""
    forward = (act_bytes + CAST_WRITES) * m * k + (weight_bytes + CAST_WRITES) * k * n
    return forward, (act_bytes + CAST_WRITES) * m * n


def fp8_peak_share(model_flops: float, step_s: float, fp8_peak: float, gpus: int) -> float:
    """Step 4: the MFU against the FP8 peak."""
    return model_flops / (step_s * fp8_peak * gpus)
