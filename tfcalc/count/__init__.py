"""Pure arithmetic over the model's description (tfcalc.architecture): every figure tfcalc predicts, each a
fold over the layers, no torch. In four sub-packages, each importing only those listed before it:

- tfcalc.count.model: the model's own counts -- parameters, FLOPs (matmul and non-matmul), activations,
  memory (weights, KV cache, a training step's state and peak), weights in a storage format, crossovers, the
  published formulas beside them;
- tfcalc.count.perf: the performance model -- how long a GEMM, a kernel, a collective and a pipeline
  schedule take on a device, from its properties;
- tfcalc.count.training: training plans -- the layout (TP, PP, DP, ZeRO/FSDP, EP, CP), each rank's shards
  and memory, the collectives, the step time, and the search over layouts;
- tfcalc.count.serving: serving -- the roofline of a decode step, static batches, tensor-parallel serving,
  continuous batching, speculative decoding.
"""
