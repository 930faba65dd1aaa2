"""Kimi Delta Attention (KDA): the gated delta rule with a decay per key channel (Kimi Team 2025, "Kimi Linear: An
Expressive, Efficient Attention Architecture", arXiv 2510.26692, section 3), as transformers 5.24 runs it
(modeling_kimi_linear.py, KimiLinearDeltaAttention). A token mixer of a FIXED-SIZE state, in the layers
``layer_pattern`` calls ``kda``.

KDA is gated DeltaNet (tfcalc.architecture.gated_deltanet) with three changes, so its component is that one's
with H key heads = H value heads, dk = dv = h (``kda_head_dim``), and these parts its own:

1. projections: ``q``, ``k``, ``v`` (transformers' q_proj, k_proj, v_proj), d -> H·h each; the decay's input
   through a rank-h bottleneck, ``f_a_proj`` d -> h then ``f_b_proj`` h -> H·h (KimiLinearForgetGate); β's,
   ``b_proj`` d -> H; the output gate's through one too, ``g_a_proj`` d -> h, ``g_b_proj`` h -> H·h; ``out``
   (o_proj) H·h -> d; no biases. A causal depthwise convolution (C = 3·H·h channels, K taps
   ``kda_conv_kernel``, default 4) over [Q | K | V], then SiLU, as gated DeltaNet's; its weights kept as three,
   ``q_conv1d``, ``k_conv1d``, ``v_conv1d``, as the checkpoints store them (transformers concatenates them on
   load, conversion_mapping.py);
2. the decay is a vector per token and head: g = -exp(A_log_head)·softplus(f + dt_bias), h channels each
   (``dt_bias`` H·h, ``A_log`` one per head): the state decays row by row, S ← diag(exp(g))·S. In the chunked
   form each chunk's c×c matrices K_β·Kᵀ and Q·Kᵀ carry the pairwise decay per channel, Σ_d k_id·k_jd·
   exp(G_id - G_jd), G the decay's cumulative sum within the chunk: no longer one matmul and a c×c mask, but
   h products per pair. tfcalc counts each as the matmul of its shape, 2·c²·h FLOPs per chunk and head (full
   square), as tfcalc's module computes it (a decayed copy of K_β or Q, then a batched contraction over the
   channels); the decayed copies, c²·h products each, and the c²·h exponentials are elementwise work
   (``elementwise``). The triangular solves, the reads of S and the update are gated DeltaNet's (its step 4);
3. the output: an RMSNorm over each head's h channels (``o_norm``, weight h, eps ``norm_eps``) times
   sigmoid(G), G the output gate (KimiLinearRMSNormGated), then out.

**FLOPs against transformers' torch path** (chunk_kimi_delta_attention): FlopCounterMode does not see its
decayed K_β·Kᵀ and Q·Kᵀ (elementwise products summed: 2·2c²h a chunk and head, counted here by hand), nor its
forward substitution building the inverse of the c×c system; it does see the products by that inverse,
(c, c) @ (c, h) for V_β and the decayed K_β, 2·2c²h, where tfcalc counts two triangular solves, c(c-1)·2h (the
convention of gated DeltaNet, whose transformers path solves): tests/test_kimi_linear.py states each term.

**Ling 3's form** (``form`` "bailing": transformers' modeling_bailing_hybrid.py, BailingHybridDeltaAttention and
BailingHybridForgetGate; layer_pattern's ``kda`` with ``kda_form`` bailing, ``kda_decay_limit`` m for b = -m),
the same recurrence and chunked scan with three differences, each a choice of this component, none a new mixer:

a. no bottlenecks: the decay's input ``f_proj`` and the output gate ``g_proj`` are full projections, d -> H·h each
   (where Kimi runs d -> h -> H·h twice), 2·d·H·h FLOPs a token each;
b. ``A_log`` stored (H,) where Kimi's is (1, 1, H, 1); the convolution stored as three (q/k/v_conv1d), as Kimi's
   (transformers concatenates them on load, conversion_mapping.py, and keeps the result in fp32:
   _keep_in_fp32_modules_strict, which changes no count here);
c. a bounded decay (``decay_bound`` b, kda_safe_gate true with kda_lower_bound b, -5 by default):
   g = b·sigmoid(exp(A_log_head)·(f + dt_bias)) in (b, 0), so each step keeps more than exp(b) of S; with kda_safe_gate
   false, Kimi's -exp(A_log_head)·softplus(f + dt_bias). The output: the same gated RMSNorm (o_norm, weight h)
   times sigmoid(G), then out.

Generation state per sequence and layer: gated DeltaNet's -- the convolution's last K inputs, C·K in the model's
dtype, and S, H·h·h in fp32 (transformers' cache, cache_utils.py LinearAttentionLayer, keeps the same two).
TP splits by heads (the bottlenecks' first halves, f_a and g_a, and the norm replicated). Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, Optional

from tfcalc.architecture.gated_deltanet import GatedDeltaNet
from tfcalc.architecture.kinds import MixerKind, register
from tfcalc.architecture.mixer import Capabilities, EagerOp, Elementwise
from tfcalc.architecture.patterns import parse
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError


@dataclass(frozen=True)
class KimiDeltaAttention(GatedDeltaNet):
    """Built by ``kda``: n_k_head = n_v_head = H, k_head_dim = v_head_dim = h (module docstring); ``form`` kimi
    (Kimi Linear's bottlenecks) or bailing (Ling 3's full projections, differences a and b), ``decay_bound``
    None (the softplus decay) or b < 0 (difference c)."""

    form: Literal["kimi", "bailing"] = "kimi"
    decay_bound: Optional[float] = None

    module = "tfcalc.model.kimi_delta:KimiDeltaModule"
    # its module (tfcalc.model.kimi_delta) runs other ops than gated DeltaNet's (the per-channel decay, its own
    # chunked form): gated DeltaNet's declared eager ops (tfcalc.architecture.gated_deltanet_eager) are not its own,
    # and its are not declared yet
    sequence_eager_ops = None

    def eager_ops(self, tokens: int, step: bool = False) -> list[EagerOp]:
        return []

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_k_head != self.n_v_head or self.k_head_dim != self.v_head_dim:
            raise InputError("Kimi Delta Attention has one head size and as many key heads as value heads")
        if self.form not in ("kimi", "bailing"):
            raise InputError(f"Kimi Delta Attention's form is kimi or bailing; got {self.form!r}")
        if self.decay_bound is not None and not self.decay_bound < 0:
            raise InputError(f"Kimi Delta Attention's decay bound must be negative (a log decay); "
                             f"got {self.decay_bound}")

    @property
    def width(self) -> int:
        return self.n_v_head * self.v_head_dim

    def weights(self) -> list[Weight]:
        """Step 1 and 3, under the names of tfcalc's module (transformers' q_proj, k_proj, v_proj and o_proj are
        q, k, v and out, as latent attention names its Q and output: tfcalc.hf_config.kimi_linear)."""
        d, H, h, w, K = self.d_model, self.n_v_head, self.v_head_dim, self.width, self.conv_kernel
        out = [Weight(f"{n}_weight", (w, d), "attention", f"KDA {n.upper()} projection", "rows") for n in "qkv"]
        conv = [Weight(f"{n}_conv1d_weight", (w, 1, K), "attention", f"KDA short convolution ({n.upper()})", "rows")
                for n in "qkv"]
        if self.form == "bailing":  # difference a (module docstring)
            return out + conv + [
                Weight("f_proj_weight", (w, d), "attention", "KDA decay projection", "rows"),
                Weight("dt_bias", (w,), "attention", "KDA decay bias (per channel)", "rows"),
                Weight("A_log", (H,), "attention", "KDA log decay rate (per head)", "rows"),
                Weight("b_proj_weight", (H, d), "attention", "KDA β projection", "rows"),
                Weight("g_proj_weight", (w, d), "attention", "KDA output gate projection", "rows"),
                Weight("o_norm_weight", (h,), "norms", "KDA gated RMSNorm weight"),
                Weight("o_weight", (d, w), "attention", "KDA output projection (out)", "cols")]
        return out + conv + [
            Weight("f_a_proj_weight", (h, d), "attention", "KDA decay bottleneck (in)"),
            Weight("f_b_proj_weight", (w, h), "attention", "KDA decay bottleneck (out)", "rows"),
            Weight("dt_bias", (w,), "attention", "KDA decay bias (per channel)", "rows"),
            # stored (1, 1, H, 1) (KimiLinearForgetGate); H here, so that TP splits it by heads as the others
            Weight("A_log", (H,), "attention", "KDA log decay rate (per head)", "rows"),
            Weight("b_proj_weight", (H, d), "attention", "KDA β projection", "rows"),
            Weight("g_a_proj_weight", (h, d), "attention", "KDA output gate bottleneck (in)"),
            Weight("g_b_proj_weight", (w, h), "attention", "KDA output gate bottleneck (out)", "rows"),
            Weight("o_norm_weight", (h,), "norms", "KDA gated RMSNorm weight"),
            Weight("o_weight", (d, w), "attention", "KDA output projection (out)", "cols")]

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        d, H, h, w = self.d_model, self.n_v_head, self.v_head_dim, self.width
        qkv = [Linear(n, "attention_proj", f"{n.upper()} projection", d, w) for n in "qkv"]
        if self.form == "bailing":  # difference a: no bottlenecks
            return qkv + [Linear("f", "attention_proj", "decay projection", d, w),
                          Linear("b", "attention_proj", "β projection", d, H),
                          Linear("g", "attention_proj", "output gate projection", d, w),
                          Linear("o", "attention_proj", "output projection (out)", w, d)]
        return qkv + [
            Linear("f_a", "attention_proj", "decay bottleneck (in)", d, h),
            Linear("f_b", "attention_proj", "decay bottleneck (out)", h, w),
            Linear("b", "attention_proj", "β projection", d, H),
            Linear("g_a", "attention_proj", "output gate bottleneck (in)", d, h),
            Linear("g_b", "attention_proj", "output gate bottleneck (out)", h, w),
            # named "o": the FLOP fold places a mixer's position mixing before its Linear "o"
            Linear("o", "attention_proj", "output projection (out)", w, d)]

    def elementwise(self, queries: int, keys: int) -> list[Elementwise]:
        """Non-matmul work per token at the FLOPs each op does per element (a declared convention): SiLU after
        the convolution (4); the decay per channel -- softplus, exp and products, or the bounded form's sum,
        products and sigmoid (6) -- and β's sigmoid (3) per
        head; the L2 norms of Q and K (3); per chunk, each token's c pairwise decays per channel (difference and
        exp, 2) and the decayed copies of K_β and Q (a product each, 2); the gated RMSNorm and the sigmoid of the
        gate (8) over H·h."""
        H, c, h, t = self.n_v_head, self.chunk, self.v_head_dim, queries
        return [Elementwise("conv_silu", "SiLU after the convolution", t * self.conv_dim, per_element=4),
                Elementwise("gates", "decay per channel" + (" (bounded sigmoid)" if self.decay_bound is not None
                                                             else " (softplus·exp)"), t * self.width, per_element=6),
                Elementwise("beta", "β sigmoid", t * H, per_element=3),
                Elementwise("qk_l2", "L2 norm of Q and K", t * 2 * self.width, per_element=3),
                Elementwise("decay", "chunk pairwise decays per channel and decayed K_β, Q",
                            self.padded(t) * H * c * h, per_element=4),
                Elementwise("gated_norm", "gated RMSNorm and sigmoid(G)", t * self.width, per_element=8)]

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool) -> dict[str, Fraction]:
        """Bytes per token autograd keeps for the backward pass of tfcalc's module (tfcalc.model.kimi_delta) over
        ``batch`` sequences of T = ``seq`` tokens, split by heads under TP (H heads of h, w = H·h, C = 3w, F = 4;
        Tp = c·⌈T/c⌉ the padded length, N = Tp / c its chunks):

        - ``qkv``: the convolution's left-padded input, e·C·(T + K - 1) a sequence, and its output (e·C); the
          forget gate's bottleneck output (e·h, Kimi's form), its fp32 input and output (softplus's, or the bounded
          form's product and sigmoid: 2F·w); β's sigmoid (F·H); Q and K before their L2 norms and 1/rms (2F·(w +
          H)); per micro-batch the three convolution weights concatenated (e·C·K) and exp(A_log) with its negation
          (F·H each; the bounded form keeps no negation);
        - ``attn_scores``, per padded token: β, Q, K, V and K_β padded (F·H·(1 + 4h)); per chunk its decays per
          channel and the decayed K_β and Q copies the contractions make (3c²h), the system and the scores (2c²),
          the right-hand side's and Q's decays, the solve's two outputs and v_new (5ch) and, over more than one
          chunk, K's copies for the two contractions (2ch); the state it starts from (h²); over more than one chunk
          the decayed Q of the chunks after the first (ch) and the updates between chunks (the whole-chunk decay,
          h, and the decayed K and its transpose, 2ch); no update after the last (tfcalc.model.kimi_delta.chunked,
          ``final``);
        - ``attn_output``: the gated norm's input (in fp32 a view of the padded output, F·w·Tp / T; below fp32 a
          copy, F·w) and 1/rms (F·H), the gate's bottleneck output (e·h, Kimi's form), the normed x̂, the norm's
          output and the gate's sigmoid (3F·w), out's input (e·w); below fp32 the norm weight's fp32 copy (F·h a
          micro-batch).

        Terms that do not grow with each token are exact fractions of one. Checked against the tensors autograd
        saves (tests/test_kimi_linear.py), fp32 and bf16, both forms, at lengths below, at and above the chunk:
        equal to the byte."""
        F, H, c, h, C, K, w = 4, self.n_v_head, self.chunk, self.v_head_dim, self.conv_dim, self.conv_kernel, self.width
        tp = self.padded(seq)
        n = tp // c
        kimi = self.form == "kimi"
        tokens = batch * seq
        layer = e * C * K + F * H * (2 if self.decay_bound is None else 1)
        qkv = Fraction(e * C * (seq + K - 1), seq) + e * C + (e * h if kimi else 0) + 2 * F * w + F * H \
            + 2 * F * (w + H) + Fraction(layer, tokens)
        per_chunk = 3 * c * c * h + 2 * c * c + (7 if n > 1 else 5) * c * h + h * h
        scan = F * H * (tp * (1 + 4 * h) + n * per_chunk + (n - 1) * (3 * c * h + h))
        norm_in = Fraction(F * w * tp, seq) if e == F else F * w
        out = norm_in + F * H + (e * h if kimi else 0) + 3 * F * w + e * w + (Fraction(F * h, tokens) if e != F else 0)
        return {"qkv": qkv, "attn_scores": Fraction(scan, seq), "attn_output": out}

    def working_set(self, kernel: str, length: int) -> int:
        """Elements per token alive at once: gated DeltaNet's, and a chunk's per-channel decays and decayed
        copies (3·c·h a head)."""
        return super().working_set(kernel, length) + 3 * self.n_v_head * self.chunk * self.v_head_dim

    def tp_widths(self) -> list[tuple[str, int]]:
        return [("kda_heads", self.n_v_head)]

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(rewind=False, tensor_parallel=True, context_parallel=False, training_kernels="fused",
                            op_recompute="Kimi Delta Attention's chunked scan")


def kda(d_model: int, heads: int, head_dim: int, conv_kernel: int = 4, norm_eps: float = 1e-5,
        causal: bool = True, form: str = "kimi", decay_bound: Optional[float] = None) -> KimiDeltaAttention:
    return KimiDeltaAttention(d_model, heads, heads, head_dim, head_dim, conv_kernel, norm_eps=norm_eps,
                              causal=causal, form=form, decay_bound=decay_bound)


# ---- its flat fields (tfcalc.architecture.kinds): the layers layer_pattern calls "kda" ----

@dataclass(frozen=True, kw_only=True)
class KimiDeltaFields:
    kda_heads: Optional[int] = None  # Kimi Linear's linear_attn_config.num_heads
    kda_head_dim: Optional[int] = None  # linear_attn_config.head_dim (keys and values alike)
    kda_conv_kernel: Optional[int] = None  # linear_attn_config.short_conv_kernel_size; None: 4
    # None: kimi (Kimi Linear's rank-h bottlenecks); bailing: Ling 3's full f_proj and g_proj, A_log per head
    kda_form: Optional[Literal["kimi", "bailing"]] = None
    # None: the decay -exp(A)·softplus(x); m > 0: the bounded -m·sigmoid(exp(A)·x) (Ling's kda_lower_bound, -m)
    kda_decay_limit: Optional[float] = None


def from_flat(cfg: Any, i: int, causal: bool) -> KimiDeltaAttention:
    return kda(cfg.d_model, cfg.kda_heads, cfg.kda_head_dim, cfg.kda_conv_kernel or 4, cfg.norm_eps, causal,
               cfg.kda_form or "kimi", None if cfg.kda_decay_limit is None else -cfg.kda_decay_limit)


def check(cfg: Any) -> None:
    """A kda layer needs kda_heads and kda_head_dim, SiLU (its convolution's activation, transformers' hidden_act)
    and a decoder; kda fields need a kda layer (one ConfigError line each)."""
    used = cfg.layer_pattern is not None and any("kda" in run.kinds for run in parse(cfg.layer_pattern))
    given = [f for f in ("kda_heads", "kda_head_dim", "kda_conv_kernel", "kda_form", "kda_decay_limit")
             if getattr(cfg, f) is not None]
    if not used:
        if given:
            raise InputError(f"field '{given[0]}' sizes Kimi Delta Attention: name its layers 'kda' in layer_pattern")
        return
    for name in ("kda_heads", "kda_head_dim"):
        if getattr(cfg, name) is None:
            raise InputError(f"layer_pattern's kda layers need '{name}'")
    if cfg.arch != "decoder":
        raise InputError("Kimi Delta Attention is built for a decoder's layers only (arch decoder)")
    if cfg.activation != "silu":
        raise InputError(f"Kimi Delta Attention's convolution is followed by SiLU: activation must be silu "
                         f"(is {cfg.activation})")


KIND = register(MixerKind("Kimi Delta Attention", KimiDeltaFields, from_flat, words=("kda",), check=check,
                          group="Kimi Delta Attention in the layer_pattern's kda layers (KimiDeltaAttention)"))
