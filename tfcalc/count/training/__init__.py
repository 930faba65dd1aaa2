"""Training plans, pure arithmetic over the model's description: the layout and its checks (``layout``,
``layout_pipeline``), how each parameter tensor is split over the ranks (``shard``) and the sharding and
precision variants (``sharding``: EP, FSDP, HSDP, fp32 gradients; ``fp8``: FP8 matmuls; ``offload``;
``context_parallel``; ``experts_parallel``), each rank's activations and memory (``rank_activations``,
``rank_memory``), the collectives of a step (``comm``), the step's time (``micro_batch_time``: one
micro-batch's compute, matmul by matmul; ``steptime``: the whole step with its communication and bubble),
the plan (``plan``) and the search over layouts (``search_space``, ``search_bound``). Built on
tfcalc.count.model and tfcalc.count.perf.
"""
