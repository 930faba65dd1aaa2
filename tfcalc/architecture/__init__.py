"""The one description of a model: per-layer components that every count, the plan and the model read.

A model is an ``Architecture``: its ``stacks`` (one, or an encoder-decoder's encoder then decoder) and a
``Head``. A ``Stack`` has ``Embeddings``, its layers stored compactly as ``Run``s (a pattern of ``Block``s
repeated: "first 3 dense, then 58 MoE", "local, global" alternating) and a final ``Norm``. A ``Block`` is
a token ``mixer`` (``Attention``, ``LatentAttention``, or any component answering the protocol of
tfcalc.architecture.mixer; optionally a cross ``Attention``), an ``FFN`` or ``MoE``, and its norms and
where they sit. Frozen dataclasses, validated as they are built (one InputError line each); the shape
of torchtitan's per-layer block configs and litgpt's component classes, so a layer kind is a value,
not a flag read in twenty places.

Using it (``cfg.architecture`` builds it once from a ``tfcalc.config.ModelConfig``)::

    arch = cfg.architecture
    for block, n in arch.output.kinds():      # each distinct layer kind and how many layers have it
        block.mixer, block.is_moe, block.ffn  # (block.attention: the mixer, by its older name)
    for placed in arch.weights():             # every parameter tensor, with the layers holding it
        placed.weight.name, placed.weight.shape, placed.weight.role, placed.layers, placed.total
    block.linears()                           # the block's matmuls (n_in, n_out, which rows)
    block.mixer.mixing(queries, keys)         # its position-mixing matmuls, full square and causal
    block.mixer.state()                       # its generation state: growing (K, V) and fixed tensors
    arch.kv_elements(context)                 # generation-state elements of the decoder's mixers
    arch.shrunk(4), arch.one_of_each()        # smaller copies: the depth pattern with fewer repeats; each
                                              # kind of block once (tfcalc.architecture.copies)

Each component lists its tensors (``weights()``: breakdown key, shape, role, how TP splits it, which
stored tensor it is fused into) and its matmuls (``linears()``); a mixer answers the rest of the protocol
(tfcalc.architecture.mixer). The folds: tfcalc.count.model.params (parameters), tfcalc.count.model.flops (FLOPs),
tfcalc.count.model.memory (generation state, activations), tfcalc.count.training.shard (a plan's shards).

The front end from flat fields (YAML, --set, Hugging Face config.json): tfcalc.architecture.flat, which builds
each layer's mixer through the registry of mixer kinds (tfcalc.architecture.kinds: each kind's flat fields, their
rules, its layer_pattern words and its builder, declared in the mixer's own module, which this package imports).
Pure Python: no torch, typer or rich here; imports nothing of tfcalc but tfcalc.errors.
"""

import importlib
import pkgutil

from tfcalc.architecture.attention import Attention
from tfcalc.architecture.block import Block, Run, Stack, compress
from tfcalc.architecture.ffn import FFN, MoE
from tfcalc.architecture.latent import LatentAttention, Yarn
from tfcalc.architecture.mixer import Capabilities, Mixer, Mixing, StateTensor
from tfcalc.architecture.model import Architecture, Embeddings, Head, Placed
from tfcalc.architecture.mtp import MTP
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.routing import Routing
from tfcalc.architecture.tensors import Linear, Weight

# every module of the package, imported here: a mixer's module registers its kind as it is imported
# (tfcalc.architecture.kinds), so a new mixer is found without a line naming it (vLLM's registry, made eager: the
# kinds must be known before tfcalc.config makes its dataclass of their fields)
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Architecture", "Attention", "Block", "Capabilities", "Embeddings", "FFN", "Head", "LatentAttention",
           "Linear", "MTP", "Mixer", "Mixing", "MoE", "Norm", "Placed", "Routing", "Run", "Stack", "StateTensor",
           "Weight", "Yarn", "compress"]
