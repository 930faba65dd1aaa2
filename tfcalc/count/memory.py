"""Analytic memory of a ModelConfig: weights, KV cache, activations, training state. Pure arithmetic, no torch.

Notation (per token unless said): b batch, s sequence length, h = d_model, q = n_head·d_head (attention
width), k = n_kv_head·d_head (K and V width), f = d_ff, a = n_head, V = vocab, L = n_layer, e = bytes per
activation element. All sizes are bytes; "GB" is 10⁹ bytes and "GiB" 2³⁰.

Weights: params × bits/8 of the dtype, rounded up (int4 packs two per byte; tf32 is stored as fp32).

KV cache (inference, a cache holding every position): 2 · b · s · L · n_kv_head · d_head elements in the
dtype -- K and V, for every layer. GQA and MQA shrink it by n_head / n_kv_head.

Activations for training -- the tensors autograd keeps for the backward pass. Korthikanti et al. 2022
("Reducing Activation Recomputation in Large Transformer Models", sec. 4.1, eq. 1) count, per layer, in
16-bit with dropout, for a GPT block (LayerNorm, GELU MLP with f = 4h, q = k = h), in bytes:

1. attention block, 11sbh + 5as²b: QKV input 2sbh; Q and K (for QKᵀ) 4sbh; softmax output 2as²b;
   softmax-dropout mask as²b (1 byte); dropout output (for ·V) 2as²b; V 2sbh; output-projection input
   2sbh; output-dropout mask sbh;
2. MLP, 19sbh: first linear input 2sbh; GELU input 8sbh; GELU output (second linear input) 8sbh;
   dropout mask sbh;
3. two LayerNorms, 4sbh: each keeps its input, 2sbh.
   Sum: sbh·(34 + 5as/h). They leave out the LayerNorm statistics (mean, 1/σ: 8 bytes per token per norm
   in fp32); we keep them.

Generalized to tfcalc's real module (tfcalc.model) -- each term is a tensor autograd saves, checked byte
for byte against the saved tensors of the real model in tests/test_memory.py -- per token per layer:

- each of the two norms: LayerNorm keeps its input (e·h) plus mean and 1/σ in fp32 (8 bytes);
  RMSNorm, which PyTorch's CPU path runs as ops on an fp32 copy, keeps that copy and the normalized
  x̂ (4·h each, 8·h in all, whatever the dtype) plus 1/rms (4 bytes);
- the QKV and the FFN-up projections keep their input (the norm output), e·h each;
- attention, fused kernel ("flash": what F.scaled_dot_product_attention runs, no s² tensor): Q, K and V
  are views of the fused QKV output, kept whole, e·(q + 2k); with RoPE the rotated Q and K are new
  tensors, e·(q + k) more (V, a view, still keeps the fused buffer alive); the output, which is also the
  output-projection input, e·q; the log-sum-exp, 4·a (fp32). GQA shows here: K and V are k wide.
- attention, "math" (scores materialized, as PyTorch does with an explicit mask -- ALiBi -- on CPU, and
  as the paper counts): Q, K and V copies with K and V repeated to every query head, 3·e·q; the softmax
  output e·a·s; the output-projection input e·q. No log-sum-exp. When V's heads need no copy (batch
  1 or a single head, without GQA) V stays a view and keeps the whole fused QKV output: e·(q + 2k)
  in place of e·q.
- FFN: ungated, the activation input and output, 2·e·f (ReLU keeps only its output: e·f); gated
  (SwiGLU/GeGLU), the fused [gate | up] output, 2·e·f, the activation output e·f and the product
  (down-projection input) e·f: 4·e·f.
- dropout: tfcalc's model has none, so the default leaves it out. ``dropout=True`` adds the paper's
  terms: a 1-byte mask on the attention output and on the FFN output (2·h), and with math attention the
  softmax-dropout mask and output, (1 + e)·a·s.

Outside the blocks: the embedding output is the first layer's input (counted there); the head keeps the
final-norm terms (when there is a final norm), the LM-head input e·h, and the log-probabilities of the
loss, 4·V (the loss runs in fp32, on the upcast logits, as is usual). The token ids are inputs, not
counted.

The backward pass begins with one more transient: the gradients of the fp32 log-probabilities and of
the fp32 logits, 8·V bytes per token, alive together with the saved log-probabilities. It is counted in
the activation peak (``Activations.total``), not in the saved bytes (``Activations.stored``).

Variants: attention kernel "flash" (the default: SDPA's fused kernels keep no s² tensor) or "math";
ALiBi defaults to "math" (its bias is an explicit mask). Full recompute (activation checkpointing of
every block): only each block's input is kept, e·h per token per layer (Korthikanti's 2sbh), and one
block's activations are rebuilt at a time during the backward pass, so one layer's worth is added to
the peak.

Other kinds (tfcalc.config), each term again a tensor the real module saves (checked the same way):

- mixture of experts: the FFN input is kept once (the router's input); for each of the k experts a token
  is routed to, the expert's input rows (index_select), its hidden tensors (as the dense FFN's), its
  output and the weighted output (both kept by the weighting and the index_add), and the routing
  weight: k·(3·e·h + hidden + e), plus the fp32 softmax of the k chosen router logits, 4·k;
- encoder (BERT): as a decoder block (no mask changes what is kept); a norm after the embeddings keeps
  what a norm keeps; BERT's pooler keeps its tanh output, e·h per sequence, and, without an LM head,
  the final hidden states it reads its first token from (a view keeps the whole tensor), e·h per token.
  Without an LM head there are no log-probabilities and no loss gradients over V: the loss of a
  training step is then the sum of the outputs;
- encoder-decoder, S source tokens: the encoder's blocks keep their terms over S tokens; the encoder
  output is kept once, e·h per source token, as the input of every decoder block's K/V projection; each
  decoder block adds, per target token, the cross-attention norm, the Q-projection input e·h, Q e·q, the
  output e·q and the log-sum-exp 4·a, and per source token its fused K/V projection output e·2k. With
  "math" attention (not what CPU runs: cross-attention has no mask, so it runs the fused kernel) it keeps,
  by analogy with self-attention and unchecked, Q e·q, K and V copies e·q per source token (or, when V
  needs no copy, the fused K/V output), and the softmax output e·a·S.
- KV cache of an encoder-decoder: the decoder's self-attention cache over T target positions, plus the
  cross-attention K and V of the S source positions, computed once from the encoder output:
  2·b·S·L·n_kv_head·d_head more. An encoder generates nothing and keeps no cache.

Training state per parameter (P params, weights in the dtype, e_w bytes):
- "adam-mixed": weights e_w + gradients e_w + fp32 master weights 4 (when the dtype is narrower than
  fp32) + fp32 Adam moments 8: 16 bytes/param in bf16 (ZeRO, Rajbhandari et al. 2020, sec. 3.1);
- "adam": everything in the weight dtype, torch.optim.Adam as it is: 4·e_w (16 in fp32, 8 in bf16);
- "sgd": weights and gradients, 2·e_w (no momentum).
The optimizer step adds temporaries, one tensor at a time in torch.optim's single-tensor code: Adam's
denominator (√v, then √v / √(1 - β₂ᵗ) + ε: two tensors the size of the largest parameter, in the
moments' dtype, alive together for an instant) and, for adam-mixed below fp32, the fp32 copy of that
tensor's gradient. They live while the activations are gone, so a training step peaks at
state + max(activation peak, step temporaries) -- the step matters only for small batches of models
whose embedding is a large share (GPT-2 at seq 256: the 38.6M-parameter embedding).
Training is modelled for fp32, tf32, bf16 and fp16 weights; fp8, int8 and int4 are inference formats here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from tfcalc.config import ConfigError, ModelConfig
from tfcalc.count.dtypes import BITS_PER_ELEMENT, DTYPES, weight_bytes
from tfcalc.count.params import param_entries
from tfcalc.count.params import total as param_total

ATTENTION_KERNELS = ("flash", "math")
RECOMPUTE = ("none", "full")
OPTIMIZERS = ("adam-mixed", "adam", "sgd")
TRAINING_DTYPES = ("fp32", "tf32", "bf16", "fp16")
FP32 = 4  # bytes of the fp32 tensors every dtype keeps somewhere (norm statistics, log-sum-exp, loss)


def check_dtype(dtype: str) -> None:
    if dtype not in BITS_PER_ELEMENT:
        raise ConfigError(f"unknown dtype '{dtype}'; choose one of {', '.join(DTYPES)}")


def activation_element_bytes(dtype: str) -> int:
    """Bytes of one activation element: the dtype's own size for fp32/tf32/bf16/fp16. fp8, int8 and int4
    are weight formats here: their matmuls dequantize and compute in bf16, so activations are 2 bytes."""
    check_dtype(dtype)
    return max(2, BITS_PER_ELEMENT[dtype] // 8)


def weights_bytes(cfg: ModelConfig, dtype: str) -> int:
    check_dtype(dtype)
    return weight_bytes(param_total(cfg), dtype)


def kv_cache_bytes(cfg: ModelConfig, batch: int, seq: int, dtype: str, src_seq: Optional[int] = None) -> int:
    """2 · b · s · L · n_kv_head · d_head elements (K and V of every decoder layer and position) in dtype;
    an encoder-decoder adds its cross-attention cache (see cross_kv_cache_bytes); an encoder has none."""
    check_dtype(dtype)
    own = 2 * batch * seq * cfg.decoder_layers * cfg.kv_dim
    return weight_bytes(own, dtype) + cross_kv_cache_bytes(cfg, batch, seq if src_seq is None else src_seq, dtype)


def cross_kv_cache_bytes(cfg: ModelConfig, batch: int, src_seq: int, dtype: str) -> int:
    """An encoder-decoder's cross-attention K and V of the src_seq source positions, in every decoder
    layer: 2 · b · S · L · n_kv_head · d_head elements, computed once from the encoder output; 0 otherwise."""
    check_dtype(dtype)
    return weight_bytes(2 * batch * src_seq * cfg.cross_attention_layers * cfg.kv_dim, dtype)


def default_attention(cfg: ModelConfig) -> str:
    """The kernel the real module's SDPA call runs on CPU: fused ("flash"), or "math" under an explicit
    mask (ALiBi's bias)."""
    return "math" if cfg.pos_encoding == "alibi" else "flash"


def _norm_bytes(cfg: ModelConfig, e: int) -> int:
    """Per token, what one norm keeps: LayerNorm its input and fp32 mean, 1/σ; RMSNorm an fp32 copy of
    its input, the fp32 x̂ and 1/rms."""
    return e * cfg.d_model + 2 * FP32 if cfg.norm == "layernorm" else 2 * FP32 * cfg.d_model + FP32


def _ffn_factor(cfg: ModelConfig) -> int:
    """Hidden-width tensors the FFN keeps: 4 gated, 1 for ReLU (keeps only its output), else 2."""
    if cfg.gated_ffn:
        return 4
    return 1 if cfg.activation == "relu" else 2


def layer_activations(
    cfg: ModelConfig, batch: int, seq: int, e: int, attention: str, dropout: bool = False
) -> dict[str, int]:
    """{component: bytes per token} autograd keeps for one block (see the module docstring)."""
    h, q, k, f, a = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim, cfg.n_head
    if attention not in ATTENTION_KERNELS:
        raise ConfigError(f"unknown attention kernel '{attention}'; choose one of {', '.join(ATTENTION_KERNELS)}")
    out = {"attn_norm": _norm_bytes(cfg, e), "qkv_input": e * h}
    if attention == "flash":
        out["qkv"] = e * (q + 2 * k)
        out["rope_qk"] = e * (q + k) if cfg.pos_encoding == "rope" else 0
        out["attn_scores"] = 0
        out["softmax_stats"] = FP32 * a  # log-sum-exp per head
    else:
        v_is_view = cfg.kv_heads == cfg.n_head and (batch == 1 or cfg.n_head == 1)
        out["qkv"] = 3 * e * q + (2 * e * k if v_is_view else 0)  # K, V repeated to every query head
        out["rope_qk"] = 0
        out["attn_scores"] = e * a * seq  # softmax output, the s² term
        out["softmax_stats"] = 0
    out["attn_output"] = e * q  # SDPA output = output-projection input
    out["ffn_norm"] = _norm_bytes(cfg, e)
    out["ffn_input"] = e * h  # a MoE's router input too
    routed = cfg.experts_active  # FFN rows per token: the top-k experts of a MoE, else 1
    out["ffn_hidden"] = routed * _ffn_factor(cfg) * e * f
    if cfg.n_expert:  # each routed copy's input, output and weighted output, its weight; fp32 softmax
        out["moe_routing"] = routed * (3 * e * h + e) + FP32 * routed
    masks = 2 * h + ((1 + e) * a * seq if attention == "math" else 0)
    out["dropout"] = masks if dropout else 0
    return out


def cross_activations(cfg: ModelConfig, batch: int, seq: int, src_seq: int, e: int, attention: str) -> dict[str, int]:
    """{component: bytes} one decoder block's cross-attention keeps, over b·T target and b·S source tokens
    (see the module docstring)."""
    h, q, k, a = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.n_head
    target, source = batch * seq, batch * src_seq
    out = {"cross_attn_norm": target * _norm_bytes(cfg, e), "cross_q_input": target * e * h}
    if attention == "flash":
        out["cross_qkv"] = target * e * q + source * e * 2 * k
        out["cross_attn_scores"], out["cross_softmax_stats"] = 0, target * FP32 * a
    else:
        v_is_view = cfg.kv_heads == cfg.n_head and (batch == 1 or cfg.n_head == 1)
        out["cross_qkv"] = target * e * q + source * e * (q + (2 * k if v_is_view else q))
        out["cross_attn_scores"], out["cross_softmax_stats"] = target * e * a * src_seq, 0
    out["cross_attn_output"] = target * e * q
    return out


def head_activations(cfg: ModelConfig, e: int) -> dict[str, int]:
    """{component: bytes per token} kept outside the blocks: embedding norm, final norm, pooler input
    (without an LM head), LM-head input and fp32 log-probs."""
    head = cfg.lm_head
    return {
        "embedding_norm": _norm_bytes(cfg, e) if cfg.embedding_norm else 0,
        "final_norm": _norm_bytes(cfg, e) if cfg.final_norm else 0,
        "pooler_input": e * cfg.d_model if cfg.pooler and not head else 0,
        "lm_head_input": e * cfg.d_model if head else 0,
        "log_probs": FP32 * cfg.vocab_size if head else 0,
    }


@dataclass(frozen=True)
class Activations:
    """Activation bytes for one training step at (batch, seq): per layer, head, and total."""

    per_layer: dict[str, int]  # bytes for one block, by component (already times b·s)
    head: dict[str, int]  # bytes outside the blocks, by component
    n_layer: int
    layer_input: int  # bytes of one block's input, e·h·b·s: all that full recompute keeps per layer
    loss_gradients: int  # fp32 gradients of the log-probs and logits as the backward pass starts
    attention: str
    recompute: str
    # an encoder-decoder's encoder blocks (over b·S source tokens); empty and 0 for the other kinds
    encoder_per_layer: dict[str, int] = dataclasses.field(default_factory=dict)
    n_encoder_layer: int = 0
    encoder_layer_input: int = 0

    @property
    def layer(self) -> int:
        """One block of the output stack (an encoder-decoder's decoder block, cross-attention included)."""
        return sum(self.per_layer.values())

    @property
    def encoder_layer(self) -> int:
        return sum(self.encoder_per_layer.values())

    @property
    def stored(self) -> int:
        """Bytes kept from the forward pass to the backward pass."""
        full = self.recompute == "full"
        per_layer = self.layer_input if full else self.layer
        per_encoder_layer = self.encoder_layer_input if full else self.encoder_layer
        return self.n_layer * per_layer + self.n_encoder_layer * per_encoder_layer + sum(self.head.values())

    @property
    def recompute_extra(self) -> int:
        """With full recompute, one block's activations rebuilt at a time during the backward pass."""
        return max(self.layer, self.encoder_layer) if self.recompute == "full" else 0

    @property
    def total(self) -> int:
        """The activation peak of a training step: stored, rebuilt layer, loss gradients."""
        return self.stored + self.recompute_extra + self.loss_gradients


def activations(
    cfg: ModelConfig,
    batch: int,
    seq: int,
    dtype: str,
    attention: Optional[str] = None,
    recompute: str = "none",
    dropout: bool = False,
    src_seq: Optional[int] = None,
) -> Activations:
    """Training activations at (batch, seq) in dtype; attention None means default_attention(cfg) (and,
    for cross-attention, which has no mask, the fused kernel). An encoder-decoder reads src_seq source
    tokens (default: seq)."""
    if recompute not in RECOMPUTE:
        raise ConfigError(f"unknown recompute '{recompute}'; choose one of {', '.join(RECOMPUTE)}")
    e, tokens, h = activation_element_bytes(dtype), batch * seq, cfg.d_model
    kernel = attention or default_attention(cfg)
    per_layer = {key: tokens * n for key, n in layer_activations(cfg, batch, seq, e, kernel, dropout).items()}
    head = {key: tokens * n for key, n in head_activations(cfg, e).items()}
    if cfg.pooler:
        head["pooler_output"] = batch * e * h  # tanh keeps its output, one row per sequence
    more = {}
    if cfg.arch == "encoder-decoder":
        src = seq if src_seq is None else src_seq
        per_layer.update(cross_activations(cfg, batch, seq, src, e, attention or "flash"))
        sources = batch * src
        encoder = layer_activations(cfg, batch, src, e, kernel, dropout)
        more = dict(encoder_per_layer={key: sources * n for key, n in encoder.items()},
                    n_encoder_layer=cfg.encoder_layers, encoder_layer_input=sources * e * h)
        head["encoder_embedding_norm"] = sources * _norm_bytes(cfg, e) if cfg.embedding_norm else 0
        head["encoder_final_norm"] = sources * _norm_bytes(cfg, e) if cfg.final_norm else 0
        head["encoder_output"] = sources * e * h  # every decoder block's K/V-projection input
    loss_gradients = 2 * FP32 * tokens * cfg.vocab_size if cfg.lm_head else 0
    return Activations(per_layer, head, cfg.n_layer, tokens * e * h, loss_gradients, kernel, recompute, **more)


def korthikanti_bytes(cfg: ModelConfig, batch: int, seq: int) -> int:
    """The paper's figure (Korthikanti et al. 2022, eq. 1), all layers: L · s·b·h·(34 + 5·a·s/h) bytes,
    16-bit, with dropout, scores materialized, h = d_model and a = n_head. Exact integer form."""
    h = cfg.d_model
    return cfg.n_layer * seq * batch * (34 * h + 5 * cfg.n_head * seq)


def forward_working_set(
    cfg: ModelConfig, batch: int, seq: int, dtype: str, attention: Optional[str] = None, src_seq: Optional[int] = None
) -> int:
    """Bytes alive at once during a no-grad forward pass, beyond the weights: the largest of
    1. attention: residual x and norm output (2h), fused QKV output (q + 2k), rotated Q, K (q + k, RoPE),
       SDPA output (q), projection output (h); math attention adds Q, K, V copies (3q) and the scores
       and their softmax (2·a·s);
    2. FFN: x and norm output (2h), then the hidden tensors: 2f ungated (input and output of the
       activation), 4f gated (fused [gate | up], activation output, product); a MoE runs one expert at a
       time on at most every token, beside the output it accumulates: 4h more (accumulator, the
       expert's input, output and weighted output);
    3. head: x, final-norm output (2h) and the logits (V; none without an LM head);
    times b·s·e; plus ALiBi's bias, a·s² elements, alive through the whole pass. No KV cache is kept.
    An encoder-decoder: the larger of the encoder's pass over S source tokens and the decoder's pass,
    during which the encoder output (b·S·h) stays alive and cross-attention adds a stage: x, norm
    output and projection output (3h), Q and the SDPA output (2q) per target token, K/V (2k) per source
    token (math: the scores and softmax, 2·a·S per target token)."""
    e, h, q, k, f, a = activation_element_bytes(dtype), cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim, cfg.n_head
    kernel = attention or default_attention(cfg)

    def stack(length: int) -> int:
        """Elements of the largest stage of one stack's blocks, and ALiBi's bias."""
        attn = 3 * h + (q + 2 * k) + q + ((q + k) if cfg.pos_encoding == "rope" else 0)
        if kernel == "math":
            attn += 3 * q + 2 * a * length
        ffn = 2 * h + (4 if cfg.gated_ffn else 2) * f + (4 * h if cfg.n_expert else 0)
        bias = a * length * length if cfg.pos_encoding == "alibi" else 0
        return batch * length * max(attn, ffn) + bias

    head = batch * seq * (2 * h + (cfg.vocab_size if cfg.lm_head else 0))
    if cfg.arch != "encoder-decoder":
        return e * max(stack(seq), head)
    src = seq if src_seq is None else src_seq
    cross = batch * seq * (3 * h + 2 * q + (2 * a * src if attention == "math" else 0)) + batch * src * 2 * k
    return e * max(stack(src), batch * src * h + max(stack(seq), cross, head))


def inference_bytes(cfg: ModelConfig, batch: int, seq: int, dtype: str, src_seq: Optional[int] = None) -> int:
    """Weights plus a KV cache of seq positions (and an encoder-decoder's cross-attention cache of
    src_seq source positions, default seq): what must fit to serve a context of seq tokens."""
    return weights_bytes(cfg, dtype) + kv_cache_bytes(cfg, batch, seq, dtype, src_seq)
