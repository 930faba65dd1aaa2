"""Mamba2: the state-space token mixer of Dao and Gu 2024 ("Transformers are SSMs", arXiv 2405.21060), as
transformers' Mamba2Mixer runs it (models/mamba2/modeling_mamba2.py; Nemotron-H's NemotronHMamba2Mixer is the
same). d = d_model, H heads of P channels (I = H·P, the inner width), G groups of B and C (each shared by
H / G heads), N the state size, K the convolution's taps, C_ the chunk size; conv_dim = I + 2·G·N.

1. in_proj d -> [z (I) | x (I) | B (G·N) | C (G·N) | dt (H)] (bias if ``bias``);
2. a causal depthwise convolution of K taps over [x | B | C] (conv_dim channels, bias if ``conv_bias``), then
   SiLU;
3. dt = softplus(dt + dt_bias) per head, A = -exp(A_log) per head; the selective scan
   h_t = exp(dt·A)·h_{t-1} + dt·x_t·B_tᵀ (per head a P × N state), y_t = h_t·C_t + D·x_t;
4. a gated RMSNorm over each of the G groups of y: norm(y · silu(z)) (MambaRMSNormGated), weight I wide;
   Falcon-H1 (modeling_falcon_h1.py, FalconH1Mixer) may instead norm first, norm(y) · silu(z)
   (``gate_norm`` "norm_then_gate": mamba_norm_before_gate), or keep no norm, y · silu(z) ("none": mamba_rms_norm
   false, no weight), and scales in_proj's five outputs by its muP multipliers (``proj_scales``, z x B C dt);
5. out_proj I -> d (its bias ``out_bias``, where it differs from in_proj's: Falcon-H1's projectors_bias).

Step 3 over a whole sequence runs chunked (the SSD algorithm, sec. 6 of the paper; transformers'
``mamba2_chunk_scan``): the T positions padded to c·C_ (c = ceil(T / C_) chunks), then per sequence, head and
chunk the five matmuls this module names (``mixing``), FlopCounterMode's count of transformers' einsums:

   a. C·Bᵀ within a chunk, (C_, N) @ (N, C_): 2·c·H·C_²·N (``cb``);
   b. the masked, decayed scores times x, (C_, C_) @ (C_, P): 2·c·H·C_²·P (``diag``);
   c. each chunk's state, (P, C_) @ (C_, N): 2·c·H·C_·P·N (``states``);
   d. the states passed between chunks, (c+1, c+1) @ (c+1, P·N) per head: 2·H·(c+1)²·P·N (``pass``);
   e. the output from each chunk's entering state, (C_, N) @ (N, P): 2·c·H·C_·N·P (``out``);

a decode step runs the recurrence: the update dt·x·Bᵀ, an outer product (P, 1) @ (1, N), and the read
h·C, (P, N) @ (N, 1), per head (2·H·P·N each), beside the decay exp(dt·A)·h (elementwise, 3·H·P·N with the
add). The convolution is counted as position mixing too: 2·conv_dim·K per position (``conv``; transformers
pads K - 1 on both sides and drops the extra K - 1 outputs, FlopCounterMode there seeing 2·conv_dim·K·(T + K - 1);
tfcalc's module pads the left only, so the count is 2·conv_dim·K·T: the difference, 2·conv_dim·K·(K - 1) per
layer and sequence, is named where the tests compare).

Generation state (``state``), per sequence and layer, fixed in the context: the convolution's last K inputs,
conv_dim × K (transformers' LinearAttentionLayer keeps K columns, the step writing the new one and convolving
over all K; only K - 1 of them carry over from one step to the next), in the cache dtype; the SSM state,
H × P × N, in ``state_dtype`` (fp32: transformers' chunked scan computes it in fp32 and its cache keeps
that tensor; Nemotron-H's config states mamba_ssm_cache_dtype float32). Tensor parallelism splits by heads and
groups (H and G multiples of TP); the state cannot rewind (a recurrent state holds no earlier position) and
does not ring over context-parallel ranks. Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, Optional

from tfcalc.architecture import mamba2_eager
from tfcalc.architecture.kinds import LayerSlots, MixerKind, register
from tfcalc.architecture.mixer import Capabilities, EagerOp, Elementwise, MixerRole, Mixing, StateTensor
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

FP32 = 4
# what the reports call its parts (tfcalc.architecture.mixer, 10.): in_proj and out_proj, then the convolution and
# the chunked scan (a-e) or the recurrence, the position mixing of a state-space layer
ROLE = MixerRole("ssm", "SSM", "ssm_proj", "SSM projections", "ssm_scan", "SSM scan (conv1d and scan)", "SSM",
                 (("qkv", "SSM: conv1d input and output, dt, x"), ("attn_scores", "SSM: chunked scan (fp32)"),
                  ("attn_output", "SSM: gated norm, out_proj input")))


@dataclass(frozen=True)
class Mamba2:
    d_model: int
    n_heads: int
    head_dim: int
    n_groups: int
    state_size: int
    conv_kernel: int = 4
    chunk_size: int = 256
    conv_bias: bool = True
    bias: bool = False  # in_proj and out_proj biases (use_bias)
    norm_eps: float = 1e-5
    state_dtype: Optional[Literal["fp32", "bf16", "fp16"]] = "fp32"  # the SSM state's; None: the cache dtype
    causal: bool = True
    role = ROLE
    out_bias: Optional[bool] = None  # out_proj's bias; None: as in_proj's (``bias``)
    gate_norm: Literal["gated", "norm_then_gate", "none"] = "gated"  # step 4
    proj_scales: Optional[tuple[float, ...]] = None  # in_proj's z, x, B, C, dt times these (Falcon-H1's mup_vector)
    dt_min: float = 0.0  # dt clamped to at least this after softplus (Zamba2's time_step_min, its dt_limit)
    module = "tfcalc.model.mamba2:Mamba2Mixer"

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "head_dim", "n_groups", "state_size", "conv_kernel", "chunk_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"mamba2 {name} must be a positive integer; got {value!r}")
        if self.n_heads % self.n_groups:
            raise InputError(f"ssm_heads ({self.n_heads}) must be a multiple of ssm_groups ({self.n_groups}): "
                             "each group's B and C serve a whole set of heads")
        if isinstance(self.dt_min, bool) or not isinstance(self.dt_min, (int, float)) or not 0 <= self.dt_min < 1e3:
            raise InputError(f"ssm_dt_min must be a number from 0 (no floor); got {self.dt_min!r}")
        if self.proj_scales is not None and len(self.proj_scales) != 5:
            raise InputError(f"ssm_proj_multipliers must give 5 numbers (z, x, B, C, dt); got {len(self.proj_scales)}")

    @property
    def has_out_bias(self) -> bool:
        return self.bias if self.out_bias is None else self.out_bias

    @property
    def inner(self) -> int:
        """I = H·P, the width of x, z and y."""
        return self.n_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels the convolution runs over: [x | B | C]."""
        return self.inner + 2 * self.n_groups * self.state_size

    @property
    def proj_width(self) -> int:
        """in_proj's output: [z | x | B | C | dt]."""
        return self.inner + self.conv_dim + self.n_heads

    def weights(self) -> list[Weight]:
        """Steps 1-5, named as transformers names them (Mamba2Mixer), but the gated norm: ``gate_norm`` (the
        block's attn_norm has the name ``norm`` would take in the breakdown)."""
        d, i, h = self.d_model, self.inner, self.n_heads
        out = [Weight("in_proj_weight", (self.proj_width, d), "attention", "Mamba2 in_proj weight", "rows")]
        out += [Weight("in_proj_bias", (self.proj_width,), "attention", "Mamba2 in_proj bias", "rows")] * self.bias
        out.append(Weight("conv1d_weight", (self.conv_dim, 1, self.conv_kernel), "attention", "Mamba2 conv1d weight",
                          "rows"))
        if self.conv_bias:
            out.append(Weight("conv1d_bias", (self.conv_dim,), "attention", "Mamba2 conv1d bias", "rows"))
        out += [Weight(name, (h,), "attention", f"Mamba2 {name}", "rows") for name in ("dt_bias", "A_log", "D")]
        if self.gate_norm != "none":
            out.append(Weight("gate_norm_weight", (i,), "norms", "Mamba2 gated RMSNorm weight", "rows"))
        out.append(Weight("out_proj_weight", (d, i), "attention", "Mamba2 out_proj weight", "cols"))
        return out + [Weight("out_proj_bias", (d,), "attention", "Mamba2 out_proj bias")] * self.has_out_bias

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        """in_proj and out_proj; the latter named ``o``, as every mixer's output projection is (the FLOP fold lists
        the mixing matmuls before it)."""
        return [Linear("in_proj", "attention_proj", "Mamba2 in_proj", self.d_model, self.proj_width),
                Linear("o", "attention_proj", "Mamba2 out_proj", self.inner, self.d_model)]

    def chunks(self, tokens: int) -> int:
        """c: the chunks a sequence of ``tokens`` is padded to."""
        return math.ceil(tokens / self.chunk_size)

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """The convolution and the chunked scan's five matmuls (module docstring, a-e) over one sequence of
        ``queries`` tokens; a decode step (``step``, or one query): the convolution over its K columns, the
        state's update and read. The causal figure of a and b counts the C_·(C_ + 1)/2 pairs of a chunk a
        position sees; c-e count whole."""
        H, P, N, K = self.n_heads, self.head_dim, self.state_size, self.conv_kernel
        conv = Mixing("conv", "causal conv1d", (queries, K, 1), self.conv_dim, 2 * queries * K * self.conv_dim,
                      self.conv_dim * K if step or queries == 1 else 0, "model")  # the ring: the model's dtype
        if step or queries == 1:
            ssm = H * P * N
            return [conv,
                    Mixing("update", "state update dt·x·Bᵀ", (P, 1, N), H, 2 * P * N * H, 0, self.state_dtype,
                           io=H * (P + N)),
                    Mixing("read", "state read h·C", (P, N, 1), H, 2 * P * N * H, ssm, self.state_dtype,
                           io=H * (N + P))]
        c, C = self.chunks(queries), self.chunk_size
        pairs = c * C * (C + 1) // 2
        return [conv,
                Mixing("cb", "chunk scores C·Bᵀ", (C, N, C), c * H, 2 * pairs * N * H),
                Mixing("diag", "chunk scores · x", (C, C, P), c * H, 2 * pairs * P * H),
                Mixing("states", "chunk states Bᵀ·x", (P, C, N), c * H, 2 * c * C * P * N * H),
                Mixing("pass", "states passed between chunks", (c + 1, c + 1, P * N), H, 2 * (c + 1) ** 2 * P * N * H),
                Mixing("out", "output from entering states C·h", (C, N, P), c * H, 2 * c * C * N * P * H)]

    def elementwise(self, queries: int, keys: int) -> list[Elementwise]:
        """Per token: SiLU on the convolution's output (4 FLOPs an element: exp, add, divide, multiply), the
        softplus and exp of dt·A per head, the decay and D skip over x (H·P, 2 each), the gated RMSNorm over I
        (silu(z) 4, times y 1, square, mean, scale and weight 4; without the norm, silu(z) times y: 5); the muP
        multipliers on in_proj's output, one multiply an element."""
        H, I_ = self.n_heads, self.inner
        norm = Elementwise("ssm", "Mamba2 gated RMSNorm", queries * I_, per_element=9) if self.gate_norm != "none" \
            else Elementwise("ssm", "Mamba2 silu(z) gate", queries * I_, per_element=5)
        mup = [Elementwise("ssm", "Mamba2 in_proj muP multipliers", queries * self.proj_width, per_element=1)]
        return [Elementwise("ssm", "Mamba2 conv SiLU", queries * self.conv_dim, per_element=4),
                Elementwise("ssm", "Mamba2 dt softplus and exp(dt·A)", queries * H, per_element=6),
                Elementwise("ssm", "Mamba2 D skip and decay", queries * I_, per_element=2),
                norm] + (mup if self.proj_scales is not None else [])

    def kernel(self, explicit_mask: bool) -> str:
        return "math"  # the chunk's (C_, C_) scores are written out

    def mask_span(self, length: int) -> tuple[None, None]:
        return None, None

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool) -> dict[str, int]:
        """Per token, the tensors autograd keeps of tfcalc's module (tfcalc.model.mamba2) beside the block's norm
        and the in_proj input, each sequence's bytes over its ``seq`` tokens (floored: the padded chunks and the
        per-chunk states are no whole number of bytes per token), named as the terms tensor parallelism splits
        by heads (tfcalc.count.training.rank_activations.SPLIT). With F = 4 (fp32), T = seq, c chunks of C_,
        T' = c·C_:

        - ``qkv``: the convolution's left-padded input and its output (SiLU's input), e·conv_dim·(2T + K - 1);
          dt before softplus (e) and after it in fp32 (F), H·T each; x in fp32 for the scan: in fp32 a view that
          keeps SiLU's whole output, e·conv_dim·T, below it a copy, F·I·T;
        - ``attn_scores``: the scan (fp32), per head: the decays, the scores C·Bᵀ and their product, 3·c·C_²;
          the four (T', N) and four (T', P) operands batched matmuls copy or keep, and two decay vectors,
          T'·(4N + 4P + 2); the states and their decays between chunks, (c + 1)² + (2c + 1)·P·N. Over one chunk
          (c = 1) x·dt is read as a view (3P where 4P) and the state entering the chunk as a view of the whole
          product, 2(c + 1)·P·N where (2c + 1)·P·N, and of one sequence B and C as views too (2N where 4N);
        - ``attn_output``: the gated norm -- silu's input z (in fp32 a view of in_proj's whole output,
          e·proj_width; below it, or scaled by proj_scales, a tensor of its own, F·I), y, silu(z) and the grouped
          input in fp32 (3·F·I), 1/rms per group (F·G), the normalized output (F·I in fp32, e·I below) -- and the
          out_proj input, e·I (without the norm, Falcon-H1's default: z, y and silu(z), and the out_proj input;
          each layout checked in fp32 in tests/model/test_falcon_h1.py).

        Checked against the tensors autograd saves in fp32 (tests/model/test_mamba2.py): equal over one chunk and
        more, A = -exp(A_log)'s two H-wide fp32 tensors included (per micro-batch, not per token). Below fp32 the
        dtype-dependent views and copies are as written above, not checked against autograd."""
        F, H, P, N, G, K, C = FP32, self.n_heads, self.head_dim, self.state_size, self.n_groups, \
            self.conv_kernel, self.chunk_size
        I_, cd, c = self.inner, self.conv_dim, self.chunks(seq)
        T_ = c * C
        qkv = e * cd * (2 * seq + K - 1) + (e + F) * H * seq + (e * cd if e == F else F * I_) * seq
        # over one chunk the matmuls read x·dt and the entering states as views (x·dt kept once; the states as the
        # whole (c + 1)-state product, not a copy of c), and of one sequence B and C too (two (T', N) where four)
        operands, states = (4 * P, (2 * c + 1) * P * N) if c > 1 else (3 * P, 2 * (c + 1) * P * N)
        operands += 4 * N if c > 1 or batch > 1 else 2 * N
        scan = F * H * (3 * c * C * C + T_ * (operands + 2) + (c + 1) ** 2 + states)
        z = e * self.proj_width if e == F and self.proj_scales is None else F * I_  # scaled: z a tensor of its own
        norm = z + 3 * F * I_ + F * G + (F if e == F else e) * I_ + e * I_
        if self.gate_norm == "none":  # z, y and silu(z) in fp32, the product (out_proj's input); not checked
            norm = z + 2 * F * I_ + e * I_
        # per token as exact fractions: a sequence's bytes over its tokens, and A = -exp(A_log)'s two fp32 H-wide
        # tensors (exp's result, and the negation the product with dt keeps) over the micro-batch's, so that the
        # fold (tfcalc.count.model.activations, times batch·seq) gives whole bytes
        return {"qkv": Fraction(qkv, seq), "attn_scores": Fraction(scan, seq) + Fraction(2 * F * H, batch * seq),
                "attn_output": norm}

    def working_set(self, kernel: str, length: int) -> int:
        """Elements per token alive at once: in_proj's output, the convolution's, the scan's chunk scores."""
        return self.proj_width + self.conv_dim + self.n_heads * min(length, self.chunk_size) + self.inner

    def eager_ops(self, tokens: int, step: bool = False) -> list[EagerOp]:
        """Every aten op its module runs beside the matmuls, one a kernel (tfcalc.architecture.mamba2_eager)."""
        return mamba2_eager.ops(self, tokens)

    def state(self) -> list[StateTensor]:
        """The convolution's last K inputs and the SSM state, both fixed in the context (module docstring)."""
        H, P, N = self.n_heads, self.head_dim, self.state_size
        # the conv ring in the model's dtype, as transformers' cache and tfcalc's runtime keep it (an FP8 KV cache
        # does not change it); the SSM state in its stated dtype
        return [StateTensor("conv", fixed=self.conv_dim * self.conv_kernel, dtype="model",
                            shape=(self.conv_dim, self.conv_kernel)),
                StateTensor("ssm", fixed=H * P * N, dtype=self.state_dtype, shape=(H, P, N))]

    def expanded_state(self) -> list[StateTensor]:
        return self.state()

    def tp_widths(self) -> list[tuple[str, int]]:
        return [("ssm_heads", self.n_heads), ("ssm_groups", self.n_groups)]

    def tp_state_heads(self) -> int:
        return self.n_heads

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(rewind=False, tensor_parallel=True, context_parallel=False, training_kernels="fused",
                            op_recompute="a state-space scan the op-level recompute policy does not model")


LETTERS = {"M": "a Mamba2 mixer", "*": "attention", "-": "the dense FFN", "E": "the mixture of experts",
           "H": "a Zamba2 hybrid layer (a shared block, then Mamba2: tfcalc.architecture.zamba2)"}


def check_pattern(cfg) -> None:
    """The flat ``hybrid_pattern`` (Nemotron-H's hybrid_override_pattern): one known letter per layer, and the
    fields each letter needs. One InputError line otherwise."""
    pattern = cfg.hybrid_pattern
    if not isinstance(pattern, str) or len(pattern) != cfg.n_layer:
        raise InputError(f"hybrid_pattern must give one letter per layer ({cfg.n_layer}); got "
                         f"{len(pattern) if isinstance(pattern, str) else pattern!r}")
    bad = sorted(set(pattern) - set(LETTERS))
    if bad:
        raise InputError(f"hybrid_pattern letter {bad[0]!r} is none of " + ", ".join(
            f"{k} ({v})" for k, v in LETTERS.items()))
    if cfg.hybrid_with_ffn and ("-" in pattern or "E" in pattern):
        raise InputError("hybrid_with_ffn puts the FFN after every M and * layer's mixer: the pattern has no - or E "
                         "layers then")
    if "E" in pattern and cfg.n_expert is None:
        raise InputError("hybrid_pattern has E (mixture-of-experts) layers: give n_expert and n_expert_active")
    if (("M" in pattern and cfg.hybrid_m_mixer == "mamba") or "H" in pattern) and (
            cfg.ssm_heads is None or cfg.ssm_head_dim is None):
        raise InputError("hybrid_pattern has M (Mamba2) layers: give ssm_heads and ssm_head_dim")
    if cfg.arch != "decoder" or cfg.cross_attention or cfg.parallel_block != "none":
        raise InputError("hybrid_pattern describes a decoder's layers of one sub-layer each: arch decoder, "
                         "no cross-attention, no parallel block")


def layer_plan(cfg: Any) -> Optional[tuple[LayerSlots, ...]]:
    """hybrid_pattern's layers (checked, ``check_pattern``): M the mixer hybrid_m_mixer names, * the kind an unnamed
    layer gets, H a Zamba2 hybrid layer,
    each with the FFN after it where ``hybrid_with_ffn`` (the mixture of experts where n_expert is given); - the
    dense FFN alone, E the mixture of experts alone. None without hybrid_pattern."""
    if cfg.hybrid_pattern is None:
        return None
    check_pattern(cfg)
    ffn = ("moe" if cfg.n_expert is not None else "dense") if cfg.hybrid_with_ffn else "none"
    # M: the kind whose layer_pattern word hybrid_m_mixer names (mamba: Mamba2; mamba_one: Mamba-1, Jamba's)
    # H: a Zamba2 hybrid layer (its shared block is its FFN: none after it; tfcalc.architecture.zamba2)
    slots = {"M": LayerSlots(cfg.hybrid_m_mixer, ffn), "*": LayerSlots("", ffn, alike=False),
             "-": LayerSlots(None, "dense"), "E": LayerSlots(None, "moe"),
             "H": LayerSlots("zamba", "none", alike=False)}
    return tuple(slots[letter] for letter in cfg.hybrid_pattern)


def from_flat(cfg) -> Mamba2:
    """The Mamba2 mixer the flat ssm_* fields describe (tfcalc.config, "state-space layers"; the pattern checked
    by ``check_pattern``)."""
    scales = tuple(cfg.ssm_proj_multipliers) if cfg.ssm_proj_multipliers is not None else None
    return Mamba2(cfg.d_model, cfg.ssm_heads, cfg.ssm_head_dim, cfg.ssm_groups, cfg.ssm_state_size,
                  cfg.ssm_conv_kernel, cfg.ssm_chunk_size, cfg.ssm_conv_bias, cfg.ssm_bias, cfg.norm_eps,
                  cfg.ssm_state_dtype, out_bias=cfg.ssm_out_bias, gate_norm=cfg.ssm_gate_norm, proj_scales=scales,
                  dt_min=cfg.ssm_dt_min or 0.0)


@dataclass(frozen=True)
class NoMixer:
    """The empty mixer slot of a layer that is its FFN alone (Nemotron-H's - and E layers: norm, then the MLP or
    the mixture of experts, modeling_nemotron_h.py NemotronHBlock): no tensors, no matmuls, no state, and
    ``sublayer`` false, so the block has no mixer norm and no mixer residual add."""

    d_model: int
    causal: bool = True
    sublayer = False
    module = "tfcalc.model.mamba2:NoMixerModule"

    def _nothing(self, *args, **kwargs) -> list:
        return []

    # no tensors, matmuls, mixing, elementwise or eager work, no state, nothing TP splits: each answer empty
    weights = linears = mixing = elementwise = eager_ops = state = expanded_state = tp_widths = _nothing

    def kernel(self, explicit_mask: bool) -> str:
        return "flash"

    def mask_span(self, length: int) -> tuple[None, None]:
        return None, None

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool) -> dict[str, int]:
        return {}

    def working_set(self, kernel: str, length: int) -> int:
        return 0

    def tp_state_heads(self) -> None:
        return None

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(rewind=True, tensor_parallel=True, context_parallel=True, op_recompute=None)


# ---- its flat fields (tfcalc.architecture.kinds): layer_pattern's word "mamba", or hybrid_pattern's M ----

@dataclass(frozen=True, kw_only=True)
class Mamba2Fields:
    # one letter per layer, each layer ONE sub-layer beside its norm (Nemotron-H's hybrid_override_pattern,
    # modeling_nemotron_h.py): M a Mamba2 mixer, * attention, - the dense FFN, E the mixture of experts; a Mamba2
    # model (Codestral Mamba) is all M. None: every layer a mixer and an FFN (layer_pattern's kinds)
    hybrid_pattern: Optional[str] = None
    # each M and * layer has the FFN after its mixer too (the mixture of experts, with its shared expert, where
    # n_expert is given): Granite-4.0-H (modeling_granitemoehybrid.py); the pattern then has no - or E
    hybrid_with_ffn: bool = False
    # which kind the pattern's M letter builds, by its layer_pattern word: mamba (Mamba2) or mamba_one (Mamba-1:
    # the mamba and falcon_mamba families, Jamba's)
    hybrid_m_mixer: Literal["mamba", "mamba_one"] = "mamba"
    ssm_heads: Optional[int] = None  # H (mamba_num_heads; Mamba2Config num_heads)
    ssm_head_dim: Optional[int] = None  # P (mamba_head_dim)
    ssm_groups: int = 1  # G groups of B and C (n_groups)
    ssm_state_size: int = 128  # N (ssm_state_size; Mamba2Config state_size)
    ssm_conv_kernel: int = 4  # K taps of the causal depthwise convolution (conv_kernel)
    ssm_chunk_size: int = 256  # the chunked scan's chunk (chunk_size)
    ssm_conv_bias: bool = True  # use_conv_bias
    ssm_bias: bool = False  # in_proj and out_proj biases (use_bias; mamba_proj_bias)
    ssm_state_dtype: Optional[Literal["fp32", "bf16", "fp16"]] = "fp32"  # the SSM state's dtype; None: the cache's
    ssm_out_bias: Optional[bool] = None  # out_proj's bias where not ssm_bias (Falcon-H1's projectors_bias)
    # the gated RMSNorm: norm(y·silu(z)) (Mamba2), norm(y)·silu(z), or none, y·silu(z) (Falcon-H1's mamba_rms_norm
    # false; mamba_norm_before_gate)
    ssm_gate_norm: Literal["gated", "norm_then_gate", "none"] = "gated"
    ssm_proj_multipliers: Optional[tuple[float, ...]] = None  # in_proj's z, x, B, C, dt times these (Falcon-H1 muP)
    ssm_dt_min: Optional[float] = None  # dt at least this after softplus (Zamba2's time_step_min); None: no floor


def check(cfg: Any) -> None:
    """hybrid_pattern (check_pattern), and the sizes a layer_pattern's mamba layers need (one line each)."""
    if cfg.hybrid_pattern is not None:
        check_pattern(cfg)
    elif cfg.hybrid_with_ffn:
        raise InputError("hybrid_with_ffn says what hybrid_pattern's M and * layers hold: give hybrid_pattern too")
    if cfg.layer_pattern is not None and re.search(r"\bmamba\b", cfg.layer_pattern) and (  # the word, not mamba_one
            cfg.ssm_heads is None or cfg.ssm_head_dim is None):
        raise InputError("layer_pattern has mamba (Mamba2) layers: give ssm_heads and ssm_head_dim")


KIND = register(MixerKind("Mamba2", Mamba2Fields, lambda cfg, i, causal: from_flat(cfg), words=("mamba",),
                          check=check, group="state-space layers and the per-layer pattern (Mamba2)",
                          layer_plan=layer_plan, empty=NoMixer))
