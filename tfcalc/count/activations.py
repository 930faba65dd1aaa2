"""Training activations of a ModelConfig: the bytes autograd keeps for the backward pass. Pure arithmetic.

Notation as in tfcalc.count.memory (per token unless said: h = d_model, q = n_head·d_head, k =
n_kv_head·d_head, f = d_ff, a = n_head, V = vocab, e = bytes per activation element).

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
for byte against the saved tensors of the real model in tests/count/test_memory.py -- per token per layer:

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

Variants: attention kernel "flash" (SDPA's fused kernels keep no s² tensor) or "math". Called with no
kernel, ``activations`` counts what tfcalc's own module runs on a CPU (``default_attention``: "math" under
ALiBi's or T5's explicit bias and with soft-capped scores) -- what a measured run is checked against; a
training request (memory --training, plan) assumes TRAINING_ATTENTION, "flash", as every current
training stack runs (FlashAttention-2 takes ALiBi slopes and a soft-cap in the kernel; T5's bias is read
by the fused kernel as an input, which it keeps: e·a·T² once, ``position_bias``). Selective recompute
(Korthikanti et al. 2022, sec. 5) keeps everything but the score terms (softmax output and its dropout),
rebuilt in the backward pass: under "flash" there are none, so it keeps what "none" keeps. Full
recompute (activation checkpointing of every block): only each block's input is kept, e·h per token
per layer (Korthikanti's 2sbh), and one block's activations are rebuilt at a time during the backward
pass, so one layer's worth is added to the peak. How a rank of a parallel layout shares these terms:
tfcalc.count.rank_activations.

Other kinds (tfcalc.config), each term again a tensor the real module saves (checked the same way):

- sandwich norms: each output norm keeps what a norm keeps; a parallel block with two norms of the same
  input keeps that input once (LayerNorm's input, or RMSNorm's in fp32), with one shared norm also one
  FFN input less;
- Q/K norms, one row per head: LayerNorm its input (a view of the fused QKV output, so all of that) and
  fp32 mean and 1/σ; RMSNorm its fp32 x̂ and 1/rms (and below fp32 an fp32 copy; in fp32 its input,
  again the fused output); attention then keeps the new Q and K, e·(q + k), as after RoPE. Partial
  rotary keeps what full rotary keeps;
- soft-capped scores (Gemma 2), written out as two batched matmuls: the operands as they flatten
  (Q, K and V as copies, or new tensors: RoPE'd or normed Q and K, K and V repeated per query head;
  views of the fused output when B or nh is 1), the tanh output and the softmax, e·a·s each; no
  log-sum-exp. T5's relative bias is an explicit mask, so "math", as ALiBi;
- a decoder-only stack with cross-attention keeps an encoder-decoder's decoder terms, and the external
  states once (every block's K/V-projection input);
- a shared expert keeps its hidden tensors as the FFN does (its input is the router's), and with a gate
  the sigmoid output e and the shared output e·h; a router that does not renormalize its top k keeps
  its fp32 softmax over all E experts, 4·E, in place of 4·k;
- a sliding window shorter than the sequence is an explicit (T, T) mask, built once per forward and kept
  by the fused kernel of every windowed block: e·T² once (not per token);
- BERT's MLM head transform: its input, the activation's input (ReLU: its output, which the norm keeps
  anyway, when not copied) and a norm; Gemma 2's logit soft-capping keeps the tanh output, e·V.

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
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from tfcalc.config import ConfigError, ModelConfig
from tfcalc.count.activation_layers import layer_list
from tfcalc.count.dtypes import activation_element_bytes

ATTENTION_KERNELS = ("flash", "math")
TRAINING_ATTENTION = "flash"  # what a training request assumes unless told: every current stack runs a fused kernel
RECOMPUTE = ("none", "selective", "full")
SCORE_TERMS = frozenset({"attn_scores", "scores_dropout", "cross_attn_scores"})  # what selective recompute rebuilds
FP32 = 4  # bytes of the fp32 tensors every dtype keeps somewhere (norm statistics, log-sum-exp, loss)


def default_attention(cfg: ModelConfig) -> str:
    """The kernel the real module runs on CPU: SDPA's fused kernel ("flash"), or "math" under an explicit
    mask (ALiBi's bias, T5's relative bias) or with soft-capped scores (written out as two matmuls)."""
    explicit = cfg.pos_encoding in ("alibi", "relative") or cfg.attn_softcap is not None
    return "math" if explicit else "flash"


def norm_bytes(cfg: ModelConfig, e: int, width: int | None = None, rows: int = 1) -> int:
    """Per token, what one norm keeps: LayerNorm its input and fp32 mean, 1/σ; RMSNorm an fp32 copy of
    its input, the fp32 x̂ and 1/rms. ``rows`` norms of ``width`` channels each (Q/K norms: one per head)."""
    width = cfg.d_model if width is None else width
    if cfg.norm == "layernorm":
        return rows * (e * width + 2 * FP32)
    return rows * (2 * FP32 * width + FP32)


def _shared_input_bytes(cfg: ModelConfig, e: int) -> int:
    """Per token, the part of norm_bytes that two norms of the same tensor keep once: LayerNorm's input;
    RMSNorm's fp32 copy, which is the input itself in fp32 (and a fresh copy per norm below fp32)."""
    if cfg.norm == "layernorm":
        return e * cfg.d_model
    return FP32 * cfg.d_model if e == FP32 else 0


def _qk_norm_keeps_qkv(cfg: ModelConfig, e: int) -> bool:
    """Whether Q/K norms keep their input, a view of the fused QKV output (so the whole of it): LayerNorm
    does; RMSNorm in fp32 does (below fp32 it keeps an fp32 copy instead)."""
    return cfg.qk_norm and (cfg.norm == "layernorm" or e == FP32)


def _qk_norm_bytes(cfg: ModelConfig, e: int) -> int:
    """Per token, what the Q and K norms keep, one row per head: LayerNorm its input (a view of the fused
    QKV output, kept anyway) and the fp32 statistics; RMSNorm x̂ and 1/rms in fp32, and below fp32 the
    fp32 copy of its input."""
    q, k, rows = cfg.q_dim, cfg.kv_dim, cfg.n_head + cfg.kv_heads
    if cfg.norm == "layernorm":
        return 2 * FP32 * rows
    return FP32 * (q + k) * (2 if e < FP32 else 1) + FP32 * rows


def _capped_attention(cfg: ModelConfig, batch: int, seq: int, e: int) -> dict[str, int]:
    """Per token, what tfcalc.model's written-out self-attention with soft-capped scores keeps: the
    operands of its two batched matmuls, the tanh and softmax outputs (s each).

    The matmuls flatten (B, nh, ...) to (B·nh, ...): a transposed view of the fused QKV output flattens
    without a copy only when B or nh is 1, and then keeps the whole fused output; otherwise the copy
    (or a new tensor: Q and K after RoPE or a Q/K norm, K and V repeated for GQA) is what is kept."""
    q, k, a = cfg.q_dim, cfg.kv_dim, cfg.n_head
    views, gqa = batch == 1 or cfg.n_head == 1, cfg.kv_heads != cfg.n_head
    new_qk = cfg.pos_encoding == "rope" or cfg.qk_norm
    q_bytes = e * q if new_qk or not views else 0
    k_bytes = e * q if gqa else (e * k if new_qk or not views else 0)
    v_bytes = e * q if gqa else (0 if views else e * k)
    fused = 0 in (q_bytes, k_bytes, v_bytes) or _qk_norm_keeps_qkv(cfg, e)  # a view of it is kept
    qkv = q_bytes + k_bytes + v_bytes + (e * (q + 2 * k) if fused else 0)
    return {"qkv": qkv, "attn_scores": 2 * e * a * seq, "softmax_stats": 0}


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
    out = {"attn_norm": norm_bytes(cfg, e), "qkv_input": e * h}
    new_qk = cfg.pos_encoding == "rope" or cfg.qk_norm  # Q and K are new tensors, not views of the QKV output
    if attention == "flash":
        out["qkv"] = e * (q + 2 * k)
        out["rope_qk"] = e * (q + k) if new_qk else 0
        out["attn_scores"] = 0
        out["softmax_stats"] = FP32 * a  # log-sum-exp per head
    elif cfg.attn_softcap is not None:
        out.update(_capped_attention(cfg, batch, seq, e), rope_qk=0)
    else:
        v_is_view = cfg.kv_heads == cfg.n_head and (batch == 1 or cfg.n_head == 1)
        fused = v_is_view or _qk_norm_keeps_qkv(cfg, e)  # the whole fused QKV output is kept through a view
        out["qkv"] = e * q * (2 if v_is_view else 3) + (e * (q + 2 * k) if fused else 0)  # K, V per query head
        out["rope_qk"] = 0
        out["attn_scores"] = e * a * seq  # softmax output, the s² term
        out["softmax_stats"] = 0
    if cfg.qk_norm:
        out["qk_norm"] = _qk_norm_bytes(cfg, e)
    out["attn_output"] = e * q  # SDPA output = output-projection input
    if cfg.norm_placement == "sandwich":
        out["attn_post_norm"] = norm_bytes(cfg, e)
    out["ffn_norm"] = {"none": norm_bytes(cfg, e), "shared_norm": 0,
                       "two_norms": norm_bytes(cfg, e) - _shared_input_bytes(cfg, e)}[cfg.parallel_block]
    out["ffn_input"] = 0 if cfg.parallel_block == "shared_norm" else e * h  # a MoE's router input too
    routed = cfg.experts_active  # FFN rows per token: the top-k experts of a MoE, else 1
    out["ffn_hidden"] = routed * _ffn_factor(cfg) * e * f
    if cfg.n_expert:  # each routed copy's input, output and weighted output, its weight; fp32 softmax
        out["moe_routing"] = routed * (3 * e * h + e) + FP32 * (routed if cfg.router_norm_topk else cfg.experts)
    if cfg.shared_expert_d_ff:  # its input is the router's; gated: the sigmoid output and the shared output
        gate = e * h + e if cfg.shared_expert_gate else 0
        out["shared_expert"] = _ffn_factor(cfg) * e * cfg.shared_expert_d_ff + gate
    if cfg.norm_placement == "sandwich":
        out["ffn_post_norm"] = norm_bytes(cfg, e)
    out["dropout"] = 2 * h if dropout else 0  # the 1-byte masks of the attention and FFN outputs
    out["scores_dropout"] = (1 + e) * a * seq if dropout and attention == "math" else 0  # mask and output
    return out


def cross_activations(cfg: ModelConfig, batch: int, seq: int, src_seq: int, e: int, attention: str) -> dict[str, int]:
    """{component: bytes} one decoder block's cross-attention keeps, over b·T target and b·S source tokens
    (see the module docstring)."""
    h, q, k, a = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.n_head
    target, source = batch * seq, batch * src_seq
    out = {"cross_attn_norm": target * norm_bytes(cfg, e), "cross_q_input": target * e * h}
    if cfg.norm_placement == "sandwich":
        out["cross_attn_post_norm"] = target * norm_bytes(cfg, e)
    if attention == "math" and cfg.attn_softcap is not None:  # written out: Q, K and V as the matmuls keep them
        gqa = cfg.kv_heads != cfg.n_head
        out["cross_qkv"] = target * e * q + source * e * (2 * q if gqa else 2 * k)
        out["cross_attn_scores"], out["cross_softmax_stats"] = target * 2 * e * a * src_seq, 0
    elif attention == "flash":
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
    (without an LM head), BERT's head transform (its input, the activation's input or output, its norm),
    LM-head input, Gemma 2's capped logits (the tanh output) and fp32 log-probs."""
    head, h = cfg.lm_head, cfg.d_model
    out = {
        "embedding_norm": norm_bytes(cfg, e) if cfg.embedding_norm else 0,
        "final_norm": norm_bytes(cfg, e) if cfg.final_norm else 0,
        "pooler_input": e * h if cfg.pooler and not head else 0,
        "lm_head_input": e * h if head else 0,
        "log_probs": FP32 * cfg.vocab_size if head else 0,
    }
    if cfg.lm_head_transform:  # ReLU keeps its output, which its norm keeps too (as input, when not copied)
        shared = cfg.activation == "relu" and e * h == _shared_input_bytes(cfg, e)
        out["head_transform"] = e * h + (0 if shared else e * h) + norm_bytes(cfg, e)
    if cfg.logit_softcap is not None:
        out["logit_softcap"] = e * cfg.vocab_size
    return out


@dataclass(frozen=True)
class Activations:
    """Activation bytes for one training step at (batch, seq): per layer, head, and total."""

    per_layer: dict[str, int]  # bytes for one block, by component (already times b·s)
    head: dict[str, int]  # bytes outside the blocks, by component
    n_layer: int
    layer_input: int  # bytes of one block's input, e·h·b·s: all that full recompute keeps per layer
    loss_gradients: int  # fp32 gradients of the log-probs and logits as the backward pass starts
    attention: str
    recompute: str  # none, selective (the score terms rebuilt in the backward pass) or full
    # an encoder-decoder's encoder blocks (over b·S source tokens); empty and 0 for the other kinds
    encoder_per_layer: dict[str, int] = dataclasses.field(default_factory=dict)
    n_encoder_layer: int = 0
    encoder_layer_input: int = 0
    moe: bool = False  # the FFN is a mixture of experts (replicated, not split, across tensor-parallel ranks)
    layers: tuple = ()  # each output-stack layer's terms where they differ (dense layers of a MoE); () alike

    def layer_terms(self, i: int) -> dict[str, int]:
        """{component: bytes} of output-stack layer i: ``per_layer`` unless layers differ. Every sum over
        layers goes through here."""
        if not 0 <= i < self.n_layer:
            raise IndexError(f"layer {i} of {self.n_layer}")
        return self.layers[i] if self.layers else self.per_layer

    def kept(self, terms: dict[str, int]) -> int:
        """Bytes of one layer's terms kept under selective recompute (the score terms dropped) or none."""
        drop = SCORE_TERMS if self.recompute == "selective" else frozenset()
        return sum(v for key, v in terms.items() if key not in drop)

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
        layers = sum(self.layer_input if full else self.kept(self.layer_terms(i)) for i in range(self.n_layer))
        per_encoder_layer = self.encoder_layer_input if full else self.kept(self.encoder_per_layer)
        return layers + self.n_encoder_layer * per_encoder_layer + sum(self.head.values())

    @property
    def recompute_extra(self) -> int:
        """With full recompute, one block's activations rebuilt at a time during the backward pass."""
        kinds = {id(t): sum(t.values()) for t in self.layers or (self.per_layer,)}
        return max(*kinds.values(), self.encoder_layer) if self.recompute == "full" else 0

    @property
    def total(self) -> int:
        """The activation peak of a training step: stored, rebuilt layer, loss gradients."""
        return self.stored + self.recompute_extra + self.loss_gradients


def activations(cfg: ModelConfig, batch: int, seq: int, dtype: str, attention: Optional[str] = None,
                recompute: str = "none", dropout: bool = False, src_seq: Optional[int] = None) -> Activations:
    """Training activations at (batch, seq) in dtype; attention None means default_attention(cfg) (and,
    for cross-attention, which has no mask, the fused kernel). An encoder-decoder reads src_seq source
    tokens (default: seq)."""
    if recompute not in RECOMPUTE:
        raise ConfigError(f"unknown recompute '{recompute}'; choose one of {', '.join(RECOMPUTE)}")
    e, tokens, h = activation_element_bytes(dtype), batch * seq, cfg.d_model
    kernel = attention or default_attention(cfg)
    more, src = {}, seq if src_seq is None else src_seq
    cross_kernel = attention or ("math" if cfg.attn_softcap is not None else "flash")  # no mask: fused, uncapped

    def block(c) -> dict[str, int]:  # one output-stack block: c is cfg, or a dense layer's view of it
        out = {key: tokens * n for key, n in layer_activations(c, batch, seq, e, kernel, dropout).items()}
        if c.cross_attention or c.arch == "encoder-decoder":  # src_seq external states (default: seq)
            out.update(cross_activations(c, batch, seq, src, e, cross_kernel))
        if c.expert_capacity_factor is not None:
            _capacity_terms(c, out, tokens, e)
        return out

    per_layer = block(cfg)
    head = {key: tokens * n for key, n in head_activations(cfg, e).items()}
    if cfg.pooler:
        head["pooler_output"] = batch * e * h  # tanh keeps its output, one row per sequence
    if cfg.cross_attention:
        head["cross_memory"] = batch * src * e * h  # every block's K/V-projection input
    if cfg.arch == "encoder-decoder":
        sources = batch * src
        encoder = layer_activations(cfg, batch, src, e, kernel, dropout)
        more = dict(encoder_per_layer={key: sources * n for key, n in encoder.items()},
                    n_encoder_layer=cfg.encoder_layers, encoder_layer_input=sources * e * h)
        head["encoder_embedding_norm"] = sources * norm_bytes(cfg, e) if cfg.embedding_norm else 0
        head["encoder_final_norm"] = sources * norm_bytes(cfg, e) if cfg.final_norm else 0
        head["encoder_output"] = sources * e * h  # every decoder block's K/V-projection input
    if cfg.expert_capacity_factor is not None and more:
        _capacity_terms(cfg, more["encoder_per_layer"], batch * src, e)
    if cfg.attention_spans(seq) - {(None, None)} and default_attention(cfg) == "flash":
        # the window is an explicit (T, T) mask there, one tensor for every windowed block, which the
        # fused kernel keeps for its backward (ALiBi's, T5's and capped scores add it in instead)
        head["window_mask"] = e * seq * seq
    if kernel == "flash" and cfg.pos_encoding == "relative":  # the fused kernel reads T5's bias as an input
        head["position_bias"] = e * cfg.n_head * (seq * seq + (src * src if cfg.arch == "encoder-decoder" else 0))
    loss_gradients = 2 * FP32 * tokens * cfg.vocab_size if cfg.lm_head else 0
    return Activations(per_layer, head, cfg.n_layer, tokens * e * h, loss_gradients, kernel, recompute, **more,
                       moe=bool(cfg.n_expert), layers=layer_list(cfg, per_layer, block))


def _capacity_terms(cfg: ModelConfig, per_layer: dict[str, int], tokens: int, e: int) -> None:
    """With an expert capacity C, each expert keeps its buffer of C rows (input and output, e·h each;
    its hidden tensors as the FFN's), and per token-expert pair it kept, the weighted output and the
    weight; counted as if no pair were dropped (exact when C >= tokens; an upper bound otherwise,
    since which pairs are dropped depends on the routing)."""
    h, f, k, E = cfg.d_model, cfg.ffn_dim, cfg.experts_active, cfg.experts
    buffer_rows = E * cfg.expert_capacity(tokens)
    kept = min(tokens * k, buffer_rows)
    per_layer["ffn_hidden"] = buffer_rows * _ffn_factor(cfg) * e * f
    softmax = FP32 * tokens * (k if cfg.router_norm_topk else E)
    per_layer["moe_routing"] = buffer_rows * 2 * e * h + kept * (e * h + e) + softmax

