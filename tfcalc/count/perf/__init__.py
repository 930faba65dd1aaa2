"""The performance model: how long a matmul, a kernel, a collective and a whole step take on a device,
from the device's properties and the work's shapes. Pure arithmetic, no torch.

- tfcalc.count.perf.hardware: the per-device properties the model reads (SM count, achievable matmul
  ceiling, achievable memory bandwidth, fixed cost per kernel, flash-attention efficiency, link latency
  and bus efficiency), each default with its source, each overridable (``PerfSpec`` is a frozen
  dataclass: ``dataclasses.replace``; the CLI's --matmul-efficiency and --bandwidth-efficiency).
- tfcalc.count.perf.gemm: achievable FLOP/s of one GEMM (m, n, k): tile and wave quantization
  (NVIDIA, "Matrix Multiplication Background User's Guide"), the main loop's fill, the ceiling.
- tfcalc.count.perf.collectives: α-β time of a ring collective on a link kind.
- tfcalc.count.perf.elementwise: memory traffic of the non-matmul kernels, kernel counts, dequantization.

Below tfcalc.count.training and tfcalc.count.serving, which apply it: a training micro-batch's compute time
per rank, matmul by matmul under the layout, is tfcalc.count.training.micro_batch_time.
"""
