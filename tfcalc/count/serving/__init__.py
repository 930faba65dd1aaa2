"""Serving estimates, pure arithmetic over the model's description: each matmul of a prefill or decode step
on a roofline (``roofline``), a static batch of requests -- latency, tokens/s, what fits, where decoding
turns compute-bound (``static``) -- and the serving modes beside it: tensor-parallel serving over the GPUs
of one node (``serving_tp``), continuous batching in steady state (``continuous``), speculative decoding
(``speculative``). Built on tfcalc.count.model and tfcalc.count.perf (and on tfcalc.count.training's ring
collectives, ``comm.sent_bytes``, for tensor parallelism's all-reduces).
"""
