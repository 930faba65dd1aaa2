"""Gated DeltaNet: linear attention with the gated delta rule (Yang, Kautz and Hatamizadeh 2024, "Gated Delta
Networks", arXiv 2412.06464), as Qwen3-Next runs it (transformers 5.24, modeling_qwen3_next.py,
Qwen3NextGatedDeltaNet). A token mixer of a FIXED-SIZE state: no K/V cache grows with the context.

Sizes: Hk key heads and Hv value heads (Hv a multiple of Hk: each key head serves r = Hv / Hk value heads),
dk and dv channels; Kw = Hk·dk, Vw = Hv·dv; the convolution runs over C = 2·Kw + Vw channels, K taps; the
chunk is c = 64 (torch_chunk_gated_delta_rule's default, which Qwen3NextGatedDeltaNet does not change).

1. projections: ``in_proj_qkvz`` d -> 2·Kw + 2·Vw (Q, K, V and the output gate Z, grouped per key head:
   [q | k | v·r | z·r] of each, fix_query_key_value_ordering), ``in_proj_ba`` d -> 2·Hv (β's and the decay's
   inputs, [b·r | a·r] per key head), ``out_proj`` Vw -> d; no biases. Qwen3.5 (modeling_qwen3_5.py,
   ``split_projections``) has the same rows as four tensors: ``in_proj_qkv`` [Q | K | V], ``in_proj_z``,
   ``in_proj_b``, ``in_proj_a``, heads in order; OLMo-Hybrid (modeling_olmo_hybrid.py, OlmoHybridGatedDeltaNet,
   ``separate_projections``) as six: ``q_proj``, ``k_proj``, ``v_proj``, ``g_proj`` (Z), ``b_proj``, ``a_proj``
   (and its checkpoints' convolution as three, ``q_conv1d``, ``k_conv1d``, ``v_conv1d``);
2. a causal depthwise convolution (``conv1d``, C channels of K taps, no bias) over [Q | K | V], then SiLU;
3. per value head: β = sigmoid(b) (times 2 where ``beta_scale`` is 2: OLMo-Hybrid's linear_allow_neg_eigval,
   β in [0, 2]), g = -exp(A_log)·softplus(a + dt_bias) (the log of the decay); Q and K
   L2-normed, Q × dk^-1/2; Q and K repeated to the Hv heads;
4. the delta rule over a state S (dk × dv per value head, fp32): S ← S·exp(g) + kᵀ·β(v - k·S·exp(g)), o = q·S.
   A forward pass runs it chunked (torch_chunk_gated_delta_rule; T padded to Tp = c·⌈T/c⌉, N = Tp / c
   chunks), per head: (a) the c×c matrices K_β·Kᵀ and Q·Kᵀ of each chunk; (b) two unit lower triangular
   solves of the c×c system, for V_β (dv columns) and the decayed K_β (dk columns) -- c(c-1)/2
   multiply-adds per column, c(c-1) FLOPs per column: FlopCounterMode has no formula for
   linalg_solve_triangular and counts 0 (tfcalc.measure.flops passes one); (c) per chunk, k_cumdecay·S and
   Q·S ((c, dk) @ (dk, dv)), the c×c scores · v_new ((c, c) @ (c, dv)) and the state update Kᵀ·v_new
   ((dk, c) @ (c, dv)). A decode step runs the recurrent form on one token: k·S, kᵀ·δ and q·S, each
   2·dk·dv FLOPs per head (tfcalc's module writes them as matmuls; transformers' recurrent torch path as
   elementwise sums, which FlopCounterMode does not see);
5. the output: a gated RMSNorm over each head's dv channels (``norm``, one weight of dv shared by the heads,
   Qwen3NextRMSNormGated: norm(o)·w·silu(z); its eps ``norm_eps``, OLMo-Hybrid's ``o_norm`` 1e-5), then
   out_proj.

Generation state per sequence and layer (``state``), allocated once: the convolution's last K inputs, C·K
in the model's dtype (transformers' cache keeps K columns, cache_utils.py LinearAttentionLayer
update_conv_state; the next output needs K - 1 of them and the newest: tfcalc keeps K, the current input
included, as transformers does), and S, Hv·dk·dv in fp32 (transformers' chunked and recurrent paths compute
in fp32 and the cache keeps the state they return). Neither grows with the context; neither can rewind.
TP splits by heads (each rank Hk/t key heads with their r value heads each: the grouped rows of step 1 split
whole); ring attention over context-parallel ranks is not modelled (refused). Pure Python: no torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, Optional

from tfcalc.architecture import gated_deltanet_eager
from tfcalc.architecture.kinds import MixerKind, register
from tfcalc.architecture.mixer import Capabilities, EagerOp, Elementwise, MixerRole, Mixing, StateTensor
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

FP32 = 4  # bytes of the fp32 tensors the chunked form computes on

CHUNK = 64  # torch_chunk_gated_delta_rule's chunk_size (modeling_qwen3_next.py), which the layer never changes
# what the reports call its parts (tfcalc.architecture.mixer, 10.): the input and output projections, and the short
# convolution with the delta rule's chunked form (or its recurrent step), the layer's position mixing
ROLE = MixerRole("deltanet", "DeltaNet", "deltanet_proj", "DeltaNet projections", "delta_rule",
                 "Delta-rule recurrence", "DeltaNet",
                 (("qkv", "DeltaNet: convolution input and output, gates"),
                  ("attn_scores", "DeltaNet: chunked delta rule (fp32)"),
                  ("attn_output", "DeltaNet: gated norm, out_proj input")))


@dataclass(frozen=True)
class GatedDeltaNet:
    d_model: int
    n_k_head: int
    n_v_head: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int = 4
    chunk: int = CHUNK
    norm_eps: float = 1e-6
    causal: bool = True
    # Qwen3.5's layout (modeling_qwen3_5.py, Qwen3_5GatedDeltaNet): four projections, in_proj_qkv ([Q | K | V],
    # heads in order), in_proj_z, in_proj_b, in_proj_a; false: Qwen3-Next's two, grouped per key head (step 1)
    split_projections: bool = False
    # OLMo-Hybrid's layout (OlmoHybridGatedDeltaNet): q_proj, k_proj, v_proj, g_proj (Z), b_proj, a_proj, heads in
    # order, each its own tensor
    separate_projections: bool = False
    beta_scale: float = 1.0  # 2.0: OLMo-Hybrid's linear_allow_neg_eigval (β = 2·sigmoid(b))
    role = ROLE
    module = "tfcalc.model.gated_deltanet:GatedDeltaNetModule"

    def __post_init__(self) -> None:
        for name in ("d_model", "n_k_head", "n_v_head", "k_head_dim", "v_head_dim", "conv_kernel", "chunk"):
            if getattr(self, name) < 1:
                raise InputError(f"gated DeltaNet {name} must be positive; got {getattr(self, name)}")
        if self.n_v_head % self.n_k_head:
            raise InputError(f"gated DeltaNet value heads ({self.n_v_head}) must be a multiple of its key heads "
                             f"({self.n_k_head}): each key head serves a whole group of value heads")
        if self.chunk % 2:
            raise InputError(f"gated DeltaNet chunk must be even; got {self.chunk}")
        if self.split_projections and self.separate_projections:
            raise InputError("gated DeltaNet: give split_projections or separate_projections, not both")

    @property
    def k_width(self) -> int:
        return self.n_k_head * self.k_head_dim

    @property
    def v_width(self) -> int:
        return self.n_v_head * self.v_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the convolution: [Q | K | V]."""
        return 2 * self.k_width + self.v_width

    def weights(self) -> list[Weight]:
        """Step 1, 2, 3, 5, named as transformers names them (Qwen3NextGatedDeltaNet)."""
        d, hv, c = self.d_model, self.n_v_head, self.conv_dim
        if self.separate_projections:
            k, v = self.k_width, self.v_width
            inputs = [Weight(f"{name}_proj_weight", (rows, d), "attention", f"DeltaNet {label} projection", "rows")
                      for name, rows, label in (("q", k, "Q"), ("k", k, "K"), ("v", v, "V"), ("g", v, "output gate"),
                                                ("b", hv, "β"), ("a", hv, "decay"))]
        elif self.split_projections:
            inputs = [Weight("in_proj_qkv_weight", (c, d), "attention", "DeltaNet Q, K, V projection", "rows"),
                      Weight("in_proj_z_weight", (self.v_width, d), "attention", "DeltaNet output gate projection",
                             "rows"),
                      Weight("in_proj_b_weight", (hv, d), "attention", "DeltaNet β projection", "rows"),
                      Weight("in_proj_a_weight", (hv, d), "attention", "DeltaNet decay projection", "rows")]
        else:
            inputs = [Weight("in_proj_qkvz_weight", (c + self.v_width, d), "attention",
                             "DeltaNet Q, K, V, Z projection", "rows"),
                      Weight("in_proj_ba_weight", (2 * hv, d), "attention", "DeltaNet β and decay projection", "rows")]
        K = self.conv_kernel
        conv = [Weight(f"{n}_conv1d_weight", (rows, 1, K), "attention", f"DeltaNet short convolution ({n.upper()})",
                       "rows") for n, rows in (("q", self.k_width), ("k", self.k_width), ("v", self.v_width))] \
            if self.separate_projections else [Weight("conv1d_weight", (c, 1, K), "attention",
                                                      "DeltaNet short convolution", "rows")]
        return inputs + conv + [
                Weight("dt_bias", (hv,), "attention", "DeltaNet decay bias", "rows"),
                Weight("A_log", (hv,), "attention", "DeltaNet log decay rate", "rows"),
                Weight("norm_weight", (self.v_head_dim,), "norms", "DeltaNet gated RMSNorm weight"),
                Weight("out_proj_weight", (d, self.v_width), "attention", "DeltaNet output projection", "cols")]

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        d, hv = self.d_model, self.n_v_head
        if self.separate_projections:
            k, v = self.k_width, self.v_width
            inputs = [Linear(f"{name}_proj", "attention_proj", f"{label} projection", d, cols)
                      for name, cols, label in (("q", k, "Q"), ("k", k, "K"), ("v", v, "V"), ("g", v, "output gate"),
                                                ("b", hv, "β"), ("a", hv, "decay"))]
        elif self.split_projections:
            inputs = [Linear("in_proj_qkv", "attention_proj", "Q, K, V projection", d, self.conv_dim),
                      Linear("in_proj_z", "attention_proj", "output gate projection", d, self.v_width),
                      Linear("in_proj_b", "attention_proj", "β projection", d, hv),
                      Linear("in_proj_a", "attention_proj", "decay projection", d, hv)]
        else:
            inputs = [Linear("in_proj_qkvz", "attention_proj", "Q, K, V, Z projection", d,
                             self.conv_dim + self.v_width),
                      Linear("in_proj_ba", "attention_proj", "β and decay projection", d, 2 * hv)]
        return inputs + [
                # named "o": the FLOP fold places a mixer's position mixing before its Linear "o"
                # (tfcalc.count.model.flops.matmul_entries), whatever the tensor is called (out_proj)
                Linear("o", "attention_proj", "output projection (out_proj)", self.v_width, d)]

    def padded(self, tokens: int) -> int:
        """Tp: the tokens padded up to whole chunks (torch_chunk_gated_delta_rule's F.pad)."""
        return -(-tokens // self.chunk) * self.chunk

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """Step 2 and 4 for one sequence of ``queries`` new tokens: a decode step (``step``) its convolution over
        the K kept inputs and the recurrent form; a forward pass the convolution's T outputs (transformers'
        causal_conv1d_fn pads K - 1 on both sides and throws the last K - 1 outputs away: 2·C·K·(K - 1) FLOPs a
        sequence that tfcalc does not count, as for LFM2's short convolution) and the chunked form over Tp
        padded tokens (module docstring, 4 a-c), full FLOPs as FlopCounterMode counts them. Causal FLOPs: those
        of the T real tokens (the padding's share left out: per chunk and head the c×c products' lower
        triangle, c(c+1)/2 pairs, the rest as they are, times T / c chunks), the convolution's T outputs kept."""
        H, dk, dv, c = self.n_v_head, self.k_head_dim, self.v_head_dim, self.chunk
        K, C = self.conv_kernel, self.conv_dim
        S = H * dk * dv
        if step:
            conv = Mixing("conv", "short convolution (K kept inputs)", (queries, K, 1), C, 2 * queries * K * C,
                          C * K, "model", io=C * (K + queries))
            return [conv,
                    Mixing("kS", "recurrent k·S", (queries, dk, dv), H, 2 * queries * dk * dv * H, S, "fp32"),
                    Mixing("update", "recurrent state update kᵀ·δ", (dk, queries, dv), H, 2 * queries * dk * dv * H),
                    Mixing("qS", "recurrent q·S", (queries, dk, dv), H, 2 * queries * dk * dv * H)]
        n = self.padded(queries) // c  # chunks of one sequence
        tri = c * (c + 1) // 2
        out = [Mixing("conv", "short convolution", (queries, K, 1), C, 2 * queries * K * C)]
        for name, label, shape, causal in (
                ("kkt", "chunk K_β·Kᵀ", (c, dk, c), 2 * tri * dk),
                ("qkt", "chunk Q·Kᵀ", (c, dk, c), 2 * tri * dk),
                ("solve_v", "triangular solve for V_β (c(c-1)/2 multiply-adds a column)", (c - 1, c // 2, dv),
                 c * (c - 1) * dv),
                ("solve_k", "triangular solve for decayed K_β", (c - 1, c // 2, dk), c * (c - 1) * dk),
                ("kS", "chunk k_cumdecay·S", (c, dk, dv), 2 * c * dk * dv),
                ("qS", "chunk Q·S", (c, dk, dv), 2 * c * dk * dv),
                ("av", "chunk scores · v_new", (c, c, dv), 2 * tri * dv),
                ("update", "chunk state update Kᵀ·v_new", (dk, c, dv), 2 * c * dk * dv)):
            out.append(Mixing(name, label, shape, H * n, causal * H * queries // c))  # the real tokens' share
        return out

    def elementwise(self, queries: int, keys: int) -> list[Elementwise]:
        """Non-matmul work per token, at the FLOPs each op does per element (a declared convention, not a
        measurement): SiLU after the convolution (4: exp, add, divide, multiply); β's sigmoid (3) and the
        decay's softplus, exp and products (6) per value head; the L2 norms of Q and K over the Hv heads
        (3: square, sum, scale); the chunk's decays (c products per value head and token: exp of the c×c
        differences, 2); the gated RMSNorm (4) and SiLU of Z (4) over Vw."""
        H, c, t = self.n_v_head, self.chunk, queries
        return [Elementwise("conv_silu", "SiLU after the convolution", t * self.conv_dim, per_element=4),
                Elementwise("gates", "β sigmoid and decay softplus·exp", t * H, per_element=9),
                Elementwise("qk_l2", "L2 norm of Q and K (value heads)", t * 2 * H * self.k_head_dim, per_element=3),
                Elementwise("decay", "chunk pairwise decays", self.padded(t) * H * c, per_element=2),
                Elementwise("gated_norm", "gated RMSNorm and SiLU(Z)", t * self.v_width, per_element=8)]

    def kernel(self, explicit_mask: bool) -> str:
        return "math"  # the chunk's c×c matrices are written out

    def mask_span(self, length: int) -> tuple[None, None]:
        return None, None

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool) -> dict[str, Fraction]:
        """Bytes per token autograd keeps for the backward pass of tfcalc's module (tfcalc.model.gated_deltanet)
        over ``batch`` sequences of T = ``seq`` tokens, each tensor in its dtype (e bytes an element, F = 4 for
        fp32), named as tensor parallelism splits them (every term by heads). Tp = c·⌈T/c⌉ is the length the
        chunked form pads to, N = Tp / c its chunks, H the value heads, C the convolution's channels:

        - ``qkv``: the convolution's left-padded input, e·C·(T + K - 1) a sequence, and its output (SiLU's input,
          e·C); β's sigmoid output, the decay's softplus input and output (3F·H); Q and K before their L2 norms and
          each norm's 1/rms (2F·H·(dk + 1)); per micro-batch, exp(A_log) and its negation (2F·H), and OLMo-Hybrid's
          three convolution weights concatenated (e·C·K);
        - ``attn_scores``, the chunked form, per padded token (Tp a sequence): β, Q, K and V padded (F·(1 + 2dk +
          dv) a head), K_β, the two solves' outputs (u, dv; w, dk), two exponentials of the running decay, v_new
          (dv); the five c×c rows (the decays, K_β·Kᵀ, Q·Kᵀ and the two masked products, 5c); per chunk the state
          it starts from (F·H·dk·dv). Over more than one chunk, the state updates between them: the decayed K and
          Q (2dk: the first chunk's product with the zero state needs no gradient for Q), the third exponential,
          and each chunk's whole-chunk decay (F·H a chunk). A forward that keeps no state builds no update after
          the last chunk (tfcalc.model.gated_deltanet.chunked, ``final``), so over one chunk there is none;
        - ``attn_output``: the gated norm's input (in fp32 a view of the padded output: F·Vw·Tp / T; below fp32 its
          fp32 copy, F·Vw) and 1/rms (F·H), the normed output (e·Vw; in fp32 F) and its product with the weight in
          fp32, SiLU(Z)'s input and output (3F·Vw), out_proj's input (e·Vw).

        Terms that do not grow with each token are exact fractions of one (the fold, times batch·seq, makes them
        whole). Checked against the tensors autograd saves (tests/test_qwen3_next.py), fp32 and bf16, at lengths
        below, at and above the chunk and in between, in the three projection layouts: equal to the byte."""
        F, H, c, dk, dv = FP32, self.n_v_head, self.chunk, self.k_head_dim, self.v_head_dim
        C, K, vw = self.conv_dim, self.conv_kernel, self.v_width
        tp = self.padded(seq)
        n = tp // c
        per_layer = 2 * F * H + (e * C * K if self.separate_projections else 0)
        qkv = Fraction(e * C * (seq + K - 1), seq) + e * C + 3 * F * H + 2 * F * H * (dk + 1) \
            + Fraction(per_layer, batch * seq)
        many = n > 1  # over one chunk no state update is built: no decayed Q or K, no chunk decay
        padded = F * H * ((4 if many else 3) + 5 * c + (6 if many else 4) * dk + 3 * dv)
        scores = Fraction(tp * padded + n * F * H * (many + dk * dv), seq)
        norm_in = Fraction(F * vw * tp, seq) if e == F else F * vw
        out = norm_in + F * H + (F if e == F else e) * vw + 3 * F * vw + e * vw
        return {"qkv": qkv, "attn_scores": scores, "attn_output": out}

    def working_set(self, kernel: str, length: int) -> int:
        """Elements per token alive at once in the mixer: the projections, the convolution's output, the
        chunk's fp32 operands and c×c rows, the output."""
        H, c = self.n_v_head, self.chunk
        return 2 * self.conv_dim + 2 * self.v_width + 2 * H + 2 * (2 * H * self.k_head_dim + self.v_width) + 3 * H * c

    def eager_ops(self, tokens: int, step: bool = False) -> list[EagerOp]:
        """One sequence of ``tokens`` (``sequence_eager_ops``); a decode step's are not declared."""
        return [] if step else self.sequence_eager_ops(1, tokens)

    def sequence_eager_ops(self, batch: int, seq: int) -> list[EagerOp]:
        """Every aten op tfcalc's module runs beside its matmuls (projections, convolution, the chunk's products and
        solves), forward and backward, one a kernel, over ``batch`` sequences of ``seq`` tokens: the chunk loop's
        kernels and its gradients' n-fold writes depend on the sequence, not only the tokens
        (tfcalc.architecture.gated_deltanet_eager, checked op for op against the module's dispatches)."""
        return gated_deltanet_eager.ops(self, batch, seq)

    def state(self) -> list[StateTensor]:
        """The convolution's last K inputs (the model's dtype, whatever --kv-dtype) and S (fp32): module docstring."""
        C, K, H = self.conv_dim, self.conv_kernel, self.n_v_head
        return [StateTensor("conv", fixed=C * K, dtype="model", shape=(C, K)),
                StateTensor("recurrent", fixed=H * self.k_head_dim * self.v_head_dim, dtype="fp32",
                            shape=(H, self.k_head_dim, self.v_head_dim))]

    def expanded_state(self) -> list[StateTensor]:
        return self.state()

    def tp_widths(self) -> list[tuple[str, int]]:
        return [("linear_key_heads", self.n_k_head), ("linear_value_heads", self.n_v_head)]

    def tp_state_heads(self) -> Optional[int]:
        return self.n_k_head  # a rank keeps whole key heads' groups (their value heads and channels)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(rewind=False, tensor_parallel=True, context_parallel=False, training_kernels="fused",
                            op_recompute="gated DeltaNet's chunked scan")


# ---- its flat fields (tfcalc.architecture.kinds): the local layers become gated DeltaNet layers ----

@dataclass(frozen=True, kw_only=True)
class GatedDeltaNetFields:
    # the mixer of the local layers (full_attention_every, layer_pattern's local kinds) in place of a window:
    # "gated_deltanet" (Qwen3-Next's linear_attention layers). None: local layers attend through a window or chunk
    linear_mixer: Optional[Literal["gated_deltanet"]] = None
    linear_key_heads: Optional[int] = None  # Qwen3-Next's linear_num_key_heads
    linear_value_heads: Optional[int] = None  # linear_num_value_heads (a multiple of the key heads)
    linear_key_head_dim: Optional[int] = None  # linear_key_head_dim
    linear_value_head_dim: Optional[int] = None  # linear_value_head_dim
    linear_conv_kernel: Optional[int] = None  # linear_conv_kernel_dim; None: 4
    # Qwen3.5's four projections (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a) in place of Qwen3-Next's two
    linear_split_projections: bool = False
    # OLMo-Hybrid's DeltaNet (modeling_olmo_hybrid.py): six projections (q, k, v, g, b, a_proj), β in [0, 2]
    # (linear_allow_neg_eigval), its gated norm at eps 1e-5 (o_norm), its layers' norms before each sub-layer while
    # the attention layers norm their outputs (norm_placement output, OLMo 3's)
    linear_separate_projections: bool = False
    linear_beta_scale: Optional[float] = None  # None: 1 (Qwen3-Next); 2: OLMo-Hybrid's linear_allow_neg_eigval
    linear_norm_eps: Optional[float] = None  # the gated norm's eps; None: norm_eps
    linear_norm_placement: Optional[Literal["pre", "post", "sandwich", "output"]] = None  # None: norm_placement


LINEAR_FIELDS = ("linear_key_heads", "linear_value_heads", "linear_key_head_dim", "linear_value_head_dim")


def from_flat(cfg: Any, i: int, causal: bool) -> GatedDeltaNet:
    return GatedDeltaNet(cfg.d_model, cfg.linear_key_heads, cfg.linear_value_heads, cfg.linear_key_head_dim,
                         cfg.linear_value_head_dim, cfg.linear_conv_kernel or 4,
                         norm_eps=cfg.linear_norm_eps or cfg.norm_eps,
                         split_projections=cfg.linear_split_projections,
                         separate_projections=cfg.linear_separate_projections,
                         beta_scale=cfg.linear_beta_scale or 1.0)


def check(cfg: Any) -> None:
    """linear_mixer makes the local layers linear-attention layers: it needs its four sizes, a decoder without
    latent attention, and no window or chunk beside it (one ConfigError line each)."""
    if cfg.linear_mixer is None:
        given = [f for f in (*LINEAR_FIELDS, "linear_conv_kernel") if getattr(cfg, f) is not None]
        given += [f for f in ("linear_split_projections", "linear_separate_projections") if getattr(cfg, f)]
        given += [f for f in ("linear_beta_scale", "linear_norm_eps", "linear_norm_placement")
                  if getattr(cfg, f) is not None]
        if given:
            raise InputError(f"field '{given[0]}' sizes the linear-attention layers: give linear_mixer too")
        return
    missing = [f for f in LINEAR_FIELDS if getattr(cfg, f) is None]
    if missing:
        raise InputError(f"linear_mixer {cfg.linear_mixer} needs '{missing[0]}'")
    if cfg.arch != "decoder" or cfg.kv_lora_rank is not None:
        raise InputError("linear_mixer applies to a decoder's layers beside softmax attention (not latent "
                         "attention, not an encoder)")
    if cfg.linear_split_projections and cfg.linear_separate_projections:
        raise InputError("give linear_split_projections or linear_separate_projections, not both")
    if cfg.sliding_window is not None or cfg.attention_chunk_size is not None or cfg.rope_local_theta is not None:
        raise InputError("give linear_mixer or sliding_window / attention_chunk_size / rope_local_theta, not both: "
                         "the local layers are linear-attention layers, with no window or RoPE")


def claims(cfg: Any, layer: Any) -> bool:
    """The local layers of a decoder whose linear_mixer is gated DeltaNet (Qwen3-Next's linear_attention layers)."""
    return cfg.linear_mixer == "gated_deltanet" and layer is not None and layer.local


def placement(cfg: Any) -> Optional[str]:
    """The DeltaNet layers' norm placement where it is their own (OLMo-Hybrid's: pre, beside output norms)."""
    return cfg.linear_norm_placement


KIND = register(MixerKind("gated DeltaNet", GatedDeltaNetFields, from_flat, check=check, claims=claims,
                          group="linear-attention layers (GatedDeltaNet)", placement=placement,
                          local_field="linear_mixer"))
