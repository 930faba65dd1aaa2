"""The real PyTorch transformer built from a ModelConfig: decoder, encoder or encoder-decoder.

The package: ``positions`` (RoPE, sinusoids, ALiBi), ``layers`` (attention, FFN, experts), ``block``
(one layer), ``transformer`` (stacks, the model, ``build_model``), ``attention_state`` (each attention
layer's generation state, allocated once at a fixed shape), ``cache`` (every layer's state and the
positions on the device), ``step`` (the one fixed-shape step for decode, verify and continuous-batching
rows: device masks, no host sync) and ``generate`` (greedy generation: a prefill, then one decode step per
token, eager or captured in CUDA graphs: ``Decoder``).
nanoGPT-sized modules (Attention, CrossAttention, FeedForward, MixtureOfExperts, Block, Stack,
Transformer), each built from its component of the description (tfcalc.architecture), so the layers
of a stack may differ (dense then MoE, local and global attention with their own RoPE bases, NoPE
layers). Every parameter here is one that tfcalc.count.model.params predicts; tests check the two agree
tensor by tensor.

- A ``Stack`` is embeddings, blocks and a final norm. ``Transformer`` is the stack that makes the output
  (a decoder's, causal; or an encoder-only model's, bidirectional) plus its heads (LM head, BERT's
  pooler); an encoder-decoder also holds ``encoder``, a bidirectional ``Stack`` whose output every
  decoder block reads through cross-attention. ``forward(src_idx, tgt_idx)`` then.
- A mixture of experts routes each token to its top-k experts (softmax over the k chosen router logits,
  as in Mixtral); each expert runs on exactly the tokens routed to it (index_select, index_add), so a
  forward pass does the matmuls of k experts per token, not of all of them. A layer's experts are
  grouped tensors (``experts.up.weight`` (E, m·f, d), ``experts.down.weight`` (E, d, f)), as in
  transformers 5, not E modules (tfcalc.model.experts).

Layout choices, and why:
- Q, K and V come from one fused Linear (``attn.qkv``, rows [Q | K | V]) and the gate and up projections
  of a gated FFN from one fused Linear (``ffn.up``, rows [gate | up]), as in gpt-fast: one large matmul
  runs closer to the machine's peak than three small ones. The counts split them back by rows.
- Attention is ``F.scaled_dot_product_attention`` (fused kernels where the device has them); grouped
  query attention uses its ``enable_gqa`` flag instead of materializing repeated K/V heads (a cached
  step folds each K/V head's query heads into its query rows instead: every backend takes that, masks
  included).
- RoPE uses the rotate-half layout (GPT-NeoX, Hugging Face Llama); the count is the same either way.
- ``build_model(cfg, "meta")`` allocates nothing, so GPT-3 175B can be built and counted anywhere.
"""

from tfcalc.model.block import Block
from tfcalc.model.cache import StaticCache
from tfcalc.model.experts import Experts, GroupedLinear, MixtureOfExperts
from tfcalc.model.ffn import FeedForward
from tfcalc.model.generate import Decoder, generate, next_token
from tfcalc.model.layers import (
    Attention,
    CrossAttention,
    Linear,
    LMHead,
    make_norm,
)
from tfcalc.model.positions import alibi_slopes, apply_rope, position_buffers, rope_tables, sinusoid_table
from tfcalc.model.transformer import Stack, Transformer, build_model

__all__ = [
    "Attention", "Block", "CrossAttention", "Experts", "FeedForward", "GroupedLinear", "LMHead", "Linear",
    "MixtureOfExperts", "Stack",
    "Decoder", "StaticCache", "Transformer", "alibi_slopes", "generate", "next_token", "apply_rope", "build_model",
    "make_norm",
    "position_buffers", "rope_tables", "sinusoid_table",
]
