"""The model's own counts, folds over its description (tfcalc.architecture), pure arithmetic: parameters
(``params``, by kind of layer ``layer_kinds``, the breakdown's components ``components``), FLOPs (``flops``:
matmuls; ``non_matmul``: softmax, norms, activations; ``terms``: the small terms both are built of;
``crossover``: where attention overtakes the FFN; ``formulas``: the published formulas beside them),
activations saved for backward (``activations``, each kind of block priced in ``activation_terms``,
``op_recompute``: what op-level checkpointing keeps), memory (``memory``: weights, KV cache, activations;
``training_memory``: a training step's state and peak; ``budget``: what fits a budget), weights in a storage
format (``quant``) and the sizes of the dtypes (``dtypes``). Imports nothing else of tfcalc.count.
"""
