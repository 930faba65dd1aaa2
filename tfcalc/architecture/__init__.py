"""The one description of a model: per-layer components that every count, the plan and the model read.

A model is an ``Architecture``: its ``stacks`` (one, or an encoder-decoder's encoder then decoder) and a
``Head``. A ``Stack`` has ``Embeddings``, its layers stored compactly as ``Run``s (a pattern of ``Block``s
repeated: "first 3 dense, then 58 MoE", "local, global" alternating) and a final ``Norm``. A ``Block`` is
an ``Attention`` (self; optionally a cross ``Attention``), an ``FFN`` or ``MoE``, and its norms and
where they sit. Frozen dataclasses, validated as they are built (one InputError line each); the shape
of torchtitan's per-layer block configs and litgpt's component classes, so a layer kind is a value,
not a flag read in twenty places.

Using it (``cfg.architecture`` builds it once from a ``tfcalc.config.ModelConfig``)::

    arch = cfg.architecture
    for block, n in arch.output.kinds():      # each distinct layer kind and how many layers have it
        block.attention.n_kv_head, block.attention.window, block.is_moe, block.ffn
    for placed in arch.weights():             # every parameter tensor, with the layers holding it
        placed.weight.name, placed.weight.shape, placed.weight.role, placed.layers, placed.total
    block.linears()                           # the block's matmuls (n_in, n_out, which rows)
    block.attention.score_dims()              # (heads, QK channels, V channels) of the score matmuls
    arch.kv_elements(context)                 # K and V elements the decoder's caches hold
    arch.shrunk(4), arch.one_of_each()        # smaller copies: the depth pattern with fewer repeats; each
                                              # kind of block once (tfcalc.architecture.copies)

Each component lists its tensors (``weights()``: breakdown key, shape, role, how TP splits it, which
stored tensor it is fused into), its matmuls (``linears()``) and, for attention, its KV cache per
position (``kv_elements()``, ``kv_positions(context)``). The folds: tfcalc.count.params (parameters),
tfcalc.count.flops (FLOPs), tfcalc.count.memory (KV cache), tfcalc.count.shard (a plan's shards).

The front end from flat fields (YAML, --set, Hugging Face config.json): tfcalc.architecture.flat.
Pure Python: no torch, typer or rich here; imports nothing of tfcalc but tfcalc.errors.
"""

from tfcalc.architecture.attention import Attention
from tfcalc.architecture.block import Block, Run, Stack, compress
from tfcalc.architecture.ffn import FFN, MoE
from tfcalc.architecture.latent import LatentAttention, Yarn
from tfcalc.architecture.model import Architecture, Embeddings, Head, Placed
from tfcalc.architecture.mtp import MTP
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.routing import Routing
from tfcalc.architecture.tensors import Linear, Weight

__all__ = ["Architecture", "Attention", "Block", "Embeddings", "FFN", "Head", "LatentAttention", "Linear", "MTP", "MoE",
           "Norm", "Placed", "Routing", "Run", "Stack", "Weight", "Yarn", "compress"]
