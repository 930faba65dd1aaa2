"""Mamba-1: the selective state-space token mixer of Gu and Dao 2023 ("Mamba: Linear-Time Sequence Modeling with
Selective State Spaces", arXiv 2312.00752, Algorithm 2 and sec. 3.4), as transformers' MambaMixer runs it
(models/mamba/modeling_mamba.py; FalconMambaMixer in modeling_falcon_mamba.py, JambaMambaMixer in
modeling_jamba.py). d = d_model, I the inner width (``intermediate_size`` = expand·d), R the rank of dt
(``time_step_rank``), N the state size, K the convolution's taps.

1. in_proj d -> [x (I) | z (I)] (bias if ``bias``);
2. a causal depthwise convolution of K taps over x (I channels, bias if ``conv_bias``), then SiLU;
3. x_proj I -> [dt (R) | B (N) | C (N)] (no bias); Falcon-Mamba puts a weightless RMSNorm on each of dt, B and C
   (``bcdt_norm`` "weightless", eps ``bcdt_norm_eps``: FalconMambaWeightlessRMSNorm), Jamba an RMSNorm with a
   weight (``bcdt_norm`` "weighted": JambaRMSNorm, R, N and N wide);
4. dt_proj R -> I (its bias is dt's bias, added in fp32 before the softplus); dt = softplus(dt), A = -exp(A_log),
   A_log I × N (a decay per channel and state index, not per head as in Mamba2);
5. the selective scan, per channel i and state index n: h_t = exp(dt_t·A)·h_{t-1} + (dt_t·x_t)·B_tᵀ (an I × N
   state), y_t = h_t·C_t + D·x_t; then y·silu(z);
6. out_proj I -> d.

**FLOPs of step 5** (``mixing``, per token): the state update (dt·x)·Bᵀ, an outer product (I, 1) @ (1, N):
2·I·N (``update``); the read h·C, (I, N) @ (N, 1): 2·I·N (``read``). Mamba-1's A varies per channel and state
index, so the scan has no chunked matmul form (Mamba2's SSD needs a scalar decay per head): transformers' torch
path runs the recurrence position by position (3·T kernels a layer), as tfcalc's module does under autograd; out
of it (prefill) tfcalc's module runs the same recurrence in chunks of about sqrt(T) (``scan_chunks``,
``scan_kernels``: about 3·sqrt(T) kernels, priced so by tfcalc.count.perf.inference), its running products and
fix-up 3 FLOPs an element more, not counted (the sequential recurrence's are). FlopCounterMode on transformers'
path sees the read (a matmul per position) but not the update, which transformers writes as two elementwise products
(discrete_B * hidden_states): the update is counted here by hand and named where the tests compare (tfcalc's
module runs it as a batched outer-product matmul, which FlopCounterMode sees). The decay exp(dt·A)·h and its add
are elementwise (``elementwise``). The convolution counts as position mixing too: 2·I·K per position (``conv``;
transformers pads K - 1 on both sides and drops the extra K - 1 outputs, FlopCounterMode there seeing
2·I·K·(T + K - 1): the difference, 2·I·K·(K - 1) per layer and sequence, is named where the tests compare, as
for Mamba2, tfcalc.architecture.mamba2).

**Generation state** (``state``), per sequence and layer, fixed in the context: the convolution's last K inputs,
I × K (transformers' cache keeps K columns; only K - 1 carry over from one step to the next), in the model's
dtype; the SSM state, I × N, in ``state_dtype`` (fp32: transformers' scan computes it in fp32 -- exp of an fp32
A -- and its cache keeps that tensor). Tensor parallelism splits by channels (I a multiple of TP: in_proj's and
dt_proj's rows, the convolution, A_log, D, x_proj's and out_proj's columns, vLLM's MambaMixer); the state cannot
rewind and does not ring over context-parallel ranks. Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, Optional

from tfcalc.architecture import kinds, mamba1_eager
from tfcalc.architecture.kinds import MixerKind, register
from tfcalc.architecture.mixer import Capabilities, EagerOp, Elementwise, Mixing, StateTensor
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

FP32 = 4
NORMS = ("none", "weightless", "weighted")
SCAN = "Mamba-1 exp(dt·A) and the decay"  # the scan's elementwise entry, whose bytes autograd_loop moves in training


def scan_chunks(queries: int) -> tuple[int, int, int]:
    """(L, c, r): a prompt of T positions scanned as c chunks of L = floor(sqrt(T)) and a tail of r < L
    (tfcalc.model.mamba1.chunked_scan): about 3·sqrt(T) kernels (``scan_kernels``)."""
    L = max(1, math.isqrt(queries))
    c = queries // L
    return L, c, queries - c * L


def scan_kernels(queries: int) -> int:
    """Kernels of the elementwise part of a prompt's scan out of autograd (tfcalc.model.mamba1.chunked_scan):
    dt·A and its exp (2), the chunks' recurrence (L - 1 addcmul_), where c > 1 their running products (L - 1 mul_),
    the entering states (a copy and c - 2 addcmul) and the fix-up (one addcmul_), the tail (r). The two matmuls
    (update, read) are one batched kernel each (``mixing``)."""
    L, c, r = scan_chunks(queries)
    return 2 + (L - 1) + ((L - 1) + c if c > 1 else 0) + r


def scan_passes(queries: int) -> int:
    """Element passes over the (T, I, N) fp32 tensors of a prompt's chunked scan, per (channel, state index): dt·A
    written (1), its exp read and written (2), the update matmul's output written and the read matmul's input read
    (2: their ``mixing`` io counts their other operands), the chunks' recurrence reading the decay, the previous and
    the current state and writing it (4 over c·(L - 1) positions), the running products reading two decays and
    writing one (3 over c·(L - 1), where c > 1), the entering states (a copy, 2, and c - 2 steps of the recurrence,
    4 each, over one position), the fix-up reading the products, the states and the entering state and writing the
    states (3 over (c - 1)·L, 1 over c - 1), the tail as the recurrence (4 over r). Times 4 bytes and I·N: the
    scan's memory traffic (``elementwise``)."""
    L, c, r = scan_chunks(queries)
    chunks = 3 * c * (L - 1) + 2 + 4 * (c - 2) + 3 * (c - 1) * L + (c - 1) if c > 1 else 0
    return 5 * queries + 4 * c * (L - 1) + chunks + 4 * r


@dataclass(frozen=True)
class Mamba1:
    d_model: int
    inner: int  # I = expand·d_model (intermediate_size)
    dt_rank: int  # R (time_step_rank)
    state_size: int = 16  # N
    conv_kernel: int = 4
    conv_bias: bool = True
    bias: bool = False  # in_proj and out_proj biases (use_bias)
    bcdt_norm: Literal["none", "weightless", "weighted"] = "none"  # RMSNorms on dt, B and C (Falcon-Mamba, Jamba)
    bcdt_norm_eps: float = 1e-6
    state_dtype: Optional[Literal["fp32", "bf16", "fp16"]] = "fp32"  # the SSM state's; None: the cache dtype
    causal: bool = True
    module = "tfcalc.model.mamba1:Mamba1Mixer"
    # the elementwise entries whose bytes the loop moves under autograd (tfcalc.count.training.mixer_loops)
    loop_entries = (SCAN,)

    def __post_init__(self) -> None:
        for name in ("d_model", "inner", "dt_rank", "state_size", "conv_kernel"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"Mamba-1 {name} must be a positive integer; got {value!r}")
        if self.bcdt_norm not in NORMS:
            raise InputError(f"ssm_bcdt_norm must be one of {', '.join(NORMS)}; got {self.bcdt_norm!r}")
        eps = self.bcdt_norm_eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
            raise InputError(f"ssm_bcdt_norm_eps must be a number in (0, 1); got {eps!r}")
        if not self.causal:
            raise InputError("a Mamba-1 mixer scans causally: it has no bidirectional form (arch encoder)")

    @property
    def proj_width(self) -> int:
        """x_proj's output: [dt (R) | B (N) | C (N)]."""
        return self.dt_rank + 2 * self.state_size

    def weights(self) -> list[Weight]:
        """Steps 1-6, named as transformers names them (MambaMixer); Jamba's weighted norms as dt_norm, b_norm,
        c_norm (its dt_layernorm, b_layernorm, c_layernorm)."""
        d, i, r, n, k = self.d_model, self.inner, self.dt_rank, self.state_size, self.conv_kernel
        out = [Weight("in_proj_weight", (2 * i, d), "attention", "Mamba-1 in_proj weight", "rows")]
        out += [Weight("in_proj_bias", (2 * i,), "attention", "Mamba-1 in_proj bias", "rows")] * self.bias
        out.append(Weight("conv1d_weight", (i, 1, k), "attention", "Mamba-1 conv1d weight", "rows"))
        out += [Weight("conv1d_bias", (i,), "attention", "Mamba-1 conv1d bias", "rows")] * self.conv_bias
        out.append(Weight("x_proj_weight", (self.proj_width, i), "attention", "Mamba-1 x_proj weight", "cols"))
        out += [Weight("dt_proj_weight", (i, r), "attention", "Mamba-1 dt_proj weight", "rows"),
                Weight("dt_proj_bias", (i,), "attention", "Mamba-1 dt_proj bias", "rows"),
                Weight("A_log", (i, n), "attention", "Mamba-1 A_log", "rows"),
                Weight("D", (i,), "attention", "Mamba-1 D", "rows")]
        if self.bcdt_norm == "weighted":
            out += [Weight(f"{p}_norm_weight", (w,), "norms", f"Mamba-1 {p} RMSNorm weight")
                    for p, w in (("dt", r), ("b", n), ("c", n))]
        out.append(Weight("out_proj_weight", (d, i), "attention", "Mamba-1 out_proj weight", "cols"))
        return out + [Weight("out_proj_bias", (d,), "attention", "Mamba-1 out_proj bias")] * self.bias

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        """in_proj, x_proj, dt_proj and out_proj, the last named ``o`` as every mixer's output projection is."""
        i = self.inner
        return [Linear("in_proj", "attention_proj", "Mamba-1 in_proj", self.d_model, 2 * i),
                Linear("x_proj", "attention_proj", "Mamba-1 x_proj", i, self.proj_width),
                Linear("dt_proj", "attention_proj", "Mamba-1 dt_proj", self.dt_rank, i),
                Linear("o", "attention_proj", "Mamba-1 out_proj", i, self.d_model)]

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """The convolution, the state update and the read (module docstring) over one sequence of ``queries``
        tokens; a decode step reads the kept conv inputs and the state. Every position's work counts whole
        (nothing is masked: the causal figure is the full one)."""
        i, n, k, t = self.inner, self.state_size, self.conv_kernel, queries
        decode = step or queries == 1
        conv = Mixing("conv", "causal conv1d", (t, k, 1), i, 2 * t * k * i, i * k if decode else 0, "model")
        return [conv,
                Mixing("update", "state update (dt·x)·Bᵀ", (i, 1, n), t, 2 * i * n * t, 0, self.state_dtype,
                       io=t * (i + n)),
                Mixing("read", "state read h·C", (i, n, 1), t, 2 * i * n * t, i * n if decode else 0,
                       self.state_dtype, io=t * (n + i))]

    def elementwise(self, queries: int, keys: int) -> list[Elementwise]:
        """Per token: SiLU on the convolution's output (4 FLOPs an element: exp, add, divide, multiply); dt's bias
        and softplus (3: add, exp, log1p); exp(dt·A) (2) and the decay h·exp(dt·A) + update (2) over I·N; the D
        skip, silu(z) and the gate over I (2 + 4 + 1); the norms on dt, B and C where the model has them (square,
        mean, rsqrt scale: 4 an element, 5 with a weight)."""
        i, n, t = self.inner, self.state_size, queries
        out = [Elementwise("ssm", "Mamba-1 conv SiLU", t * i, per_element=4),
               Elementwise("ssm", "Mamba-1 dt bias and softplus", t * i, per_element=3),
               # a prompt's chunked scan runs in scan_kernels(t) kernels, moving scan_passes(t) fp32 passes (its
               # running products and fix-up, 3 more FLOPs an element, not counted: the sequential recurrence's are)
               Elementwise("ssm", SCAN, t * i * n, per_element=4,
                           kernels=scan_kernels(t) if t > 1 else 1,
                           traffic=FP32 * i * n * scan_passes(t) if t > 1 else None),
               Elementwise("ssm", "Mamba-1 D skip and silu(z) gate", t * i, per_element=7)]
        if self.bcdt_norm != "none":
            out.append(Elementwise("ssm", "Mamba-1 RMSNorms on dt, B, C", t * self.proj_width,
                                   per_element=5 if self.bcdt_norm == "weighted" else 4))
        return out

    def autograd_loop(self, batch: int, seq: int) -> tuple[int, int, int, int]:
        """(forward bytes, backward bytes, forward kernels, backward kernels) of the scan under autograd, where
        tfcalc.model.mamba1 runs the recurrence position by position (a training step; out of autograd the
        chunked scan, ``scan_kernels``), per layer, priced by tfcalc.count.training.mixer_loops.

        Kernels: forward h_1's clone, a mul and an add at each later position, a bmm reading each (h·C), the
        stack: 3T; backward 5T: the read's two bmm a position (2T), the mul's two products at each later position
        (2T - 2), the sum of h's two gradients at each earlier one (T - 1), the stacks unbind's backward makes of
        dA's, the update's and C's gradients (3). Bytes, the fp32 passes over (I, N) a position, times 4·b·I·N:
        forward dt·A written, its exp read and written, the update's bmm output written (4T) and the loop (the
        clone 2, each later mul and add 3 + 3, each read 1: 7T - 4), 11T - 4; backward 26T - 9: the read's
        gradient bmms write h's gradient and read hᵀ (2T), the mul's products (6T - 6), h's sum (3T - 3), the
        stacks of dA's and the update's gradients read and written (4T), the update bmm reading its gradient twice
        (2T), exp's backward (3T), dt·A's (a product and a sum over N for dt's gradient, 3T; a product and a sum
        over the batch and positions for A's, 3T), and that sum's (I, N) output, 4·I·N bytes whatever the batch.
        Checked against the bytes and kernels a tiny model's forward and backward dispatch (TorchDispatchMode,
        tests/model/test_mamba1_costs.py), the bytes to the byte; before, 23T - 8 backward, fitted on an
        instrument that read neither stack's list of inputs nor hᵀ, and the backward's kernels a bound (5 to 6 a
        position: the in-place accumulations it saw were a second backward's into kept .grad tensors). dt·A's
        and exp's kernels (2 forward, 5 backward) are not the loop's: the scan's elementwise entry keeps them, as
        one fused kernel (tfcalc.count.training.mixer_loops). Indexing the positions (select) instead made the
        backward quadratic: a zero-filled (T, I, N) gradient a position, summed (8T² passes; falcon-mamba-7b at
        4,096 tokens 26 s a layer on an H100's bandwidth)."""
        T, unit = seq, FP32 * batch * self.inner * self.state_size
        return unit * (11 * T - 4), unit * (26 * T - 9) + FP32 * self.inner * self.state_size, 3 * T, 5 * T

    def kernel(self, explicit_mask: bool) -> str:
        return "flash"  # no (T, T) scores: the scan is position by position

    def mask_span(self, length: int) -> tuple[None, None]:
        return None, None

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool) -> dict[str, int]:
        """Per token, the tensors autograd keeps of tfcalc's module (tfcalc.model.mamba1) beside the block's norm
        and the in_proj input, each in its dtype (e bytes an element, F = 4 for fp32; an fp32 use of an e tensor is
        a copy below fp32 and the tensor itself in fp32), named as the terms tensor parallelism splits by channels
        (tfcalc.count.training.rank_activations.SPLIT) but ``ssm_x_proj``, kept whole on every rank:

        - ``qkv``: the convolution's left-padded input, e·I·(T + K - 1) over a sequence (floored per token); SiLU's
          input and output, 2·e·I; dt_proj's output in fp32 (softplus's input, F·I), dt (F·I) and x in fp32 (a
          copy below fp32, F·I);
        - ``ssm_x_proj``, the (R + 2N)-wide tensors every TP rank keeps whole (x_proj's output is summed over the
          ranks' channels): without norms x_proj's output [dt | B | C], e·(R + 2N), which dt_proj reads, and B's
          and C's fp32 copies (2·F·N); with norms on dt, B, C, instead: their fp32 inputs (x_proj's output in
          fp32, copies below it: F·(R + 2N)), 1/rms of each (3F), with a weight the normed values before it
          (e·(R + 2N)), and the outputs dt_proj and the scan read (e·R, and B and C in fp32, 2·F·N);
        - ``attn_scores``: the scan, fp32: exp(dt·A) and every state h_1..h_T, 2·F·I·N; the update's operand dt·x,
          F·I;
        - ``attn_output``: y + D·x (F·I), silu(z) (F·I) and its input z (below fp32 an fp32 copy, F·I; in fp32 a
          view of in_proj's whole output, e·2I), and out_proj's input (e·I).

        The per-sequence convolution input and the per-layer tensors that do not grow with the tokens (exp(A_log)
        and A, F·I·N each, and below fp32 D's fp32 copy, F·I) are exact fractions of a token (the fold, times
        batch·seq, makes them whole). Checked against the tensors autograd saves in fp32 and bf16
        (tests/model/test_mamba1.py): equal to the byte."""
        F, i, r, n, k, w = FP32, self.inner, self.dt_rank, self.state_size, self.conv_kernel, self.proj_width
        low = e != F

        def fp32_use(elements: int) -> int:  # an fp32 use of an e tensor: a copy below fp32, a view in fp32
            return F * elements if low else 0

        qkv = Fraction(e * i * (seq + k - 1), seq) + 2 * e * i + F * i + F * i + fp32_use(i)
        if self.bcdt_norm == "none":
            x_proj = e * w + fp32_use(2 * n)
        else:  # the norms read x_proj's output in fp32 (itself in fp32, copies below it): nothing keeps it in e
            x_proj = F * w + 3 * F + e * r + F * 2 * n + e * w * (self.bcdt_norm == "weighted")
        # per micro-batch, not per token: exp(A_log) and A (F·I·N each), below fp32 D's fp32 copy (F·I)
        scan = 2 * F * i * n + F * i + Fraction(2 * F * i * n + fp32_use(i), batch * seq)
        out = F * i + F * i + (fp32_use(i) if low else e * 2 * i) + e * i
        return {"qkv": qkv, "ssm_x_proj": x_proj, "attn_scores": scan, "attn_output": out}

    def working_set(self, kernel: str, length: int) -> int:
        """Elements per token alive at once in the activations' dtype, at the prefill's peak (tfcalc.model.mamba1:
        the output's D·x + y): in_proj's output (2I), the convolution's (I) and x_proj's (R + 2N); the fp32 rest
        in ``fp32_working_set``."""
        return 2 * self.inner + self.inner + self.proj_width

    def fp32_working_set(self, kernel: str, length: int, e: int) -> int:
        """Elements per token alive at that peak in fp32 whatever the activations' dtype (4 bytes each,
        tfcalc.count.model.memory.forward_working_set): dt (I), the chunked scan's exp(dt·A) and states (2·I·N,
        chunked_scan works in place on the two), the states' read h·C, D·x and their sum (3I), and below fp32 x's
        fp32 copy (I). Checked against the peak of the storages a tiny model's prefill allocates
        (tests/model/test_mamba1_costs.py); before, the two (T, I, N) tensors were counted at the activations'
        bytes (falcon-mamba-7b bf16 at 4,096 tokens about 2.1 GB under)."""
        i = self.inner
        return i + 2 * i * self.state_size + 3 * i + (i if e < 4 else 0)

    def eager_ops(self, tokens: int, step: bool = False) -> list[EagerOp]:
        """Every aten op tfcalc's module runs beside its matmuls and the position loop, forward and backward, one
        a kernel (tfcalc.architecture.mamba1_eager, checked op for op against the module's dispatches): the
        (..., I, N) bytes of dt·A and exp are the loop's (``autograd_loop``), their kernels here."""
        return mamba1_eager.ops(self, tokens)

    def state(self) -> list[StateTensor]:
        """The convolution's last K inputs (the model's dtype) and the SSM state, both fixed in the context."""
        i, n = self.inner, self.state_size
        return [StateTensor("conv", fixed=i * self.conv_kernel, dtype="model", shape=(i, self.conv_kernel)),
                StateTensor("ssm", fixed=i * n, dtype=self.state_dtype, shape=(i, n))]

    def expanded_state(self) -> list[StateTensor]:
        return self.state()

    def tp_widths(self) -> list[tuple[str, int]]:
        return [("ssm_inner", self.inner)]

    def tp_state_heads(self) -> int:
        return self.inner  # each channel's conv inputs and N states are its own

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(rewind=False, tensor_parallel=True, context_parallel=False, training_kernels="fused",
                            op_recompute="a state-space scan the op-level recompute policy does not model")


# ---- its flat fields (tfcalc.architecture.kinds): layer_pattern's word "mamba_one", or a per-layer plan's M
# that names it (the Mamba2 kind's hybrid_m_mixer). Mamba2's fields it shares (read as cfg.<field>):
# ssm_state_size, ssm_conv_kernel, ssm_conv_bias, ssm_bias, ssm_state_dtype ----

@dataclass(frozen=True, kw_only=True)
class Mamba1Fields:
    ssm_inner: Optional[int] = None  # I, Mamba-1's inner width (intermediate_size = expand·hidden_size)
    ssm_dt_rank: Optional[int] = None  # R (time_step_rank); None: ceil(d_model / 16), transformers' "auto"
    # RMSNorms on dt, B and C after x_proj: none (Mamba), weightless (Falcon-Mamba), weighted (Jamba)
    ssm_bcdt_norm: Literal["none", "weightless", "weighted"] = "none"
    ssm_bcdt_norm_eps: float = 1e-6  # their eps (Falcon-Mamba's mixer_rms_eps; Jamba's rms_norm_eps)


def _uses(cfg: Any) -> bool:
    """Whether any layer of the config is a Mamba-1 mixer: a layer_pattern word, or a layer of a kind's own
    per-layer plan (kinds.layer_plan: Jamba's, the mamba families') that names it."""
    pattern = cfg.layer_pattern
    plan = kinds.layer_plan(cfg)
    return (plan is not None and any(slots.mixer == "mamba_one" for slots in plan)) \
        or (isinstance(pattern, str) and "mamba_one" in pattern)


def check(cfg: Any) -> None:
    """The fields a Mamba-1 layer needs, where the config has one (one line each); the ranges are the
    component's (``Mamba1.__post_init__``)."""
    if not _uses(cfg):
        return
    if cfg.ssm_inner is None:
        raise InputError("the config has Mamba-1 layers: give ssm_inner (the inner width, expand·d_model)")
    if cfg.ssm_inner < 1:
        raise InputError(f"ssm_inner must be a positive integer; got {cfg.ssm_inner}")
    if cfg.ssm_dt_rank is not None and cfg.ssm_dt_rank < 1:
        raise InputError(f"ssm_dt_rank must be a positive integer; got {cfg.ssm_dt_rank}")
    if not 0 < cfg.ssm_bcdt_norm_eps < 1:
        raise InputError(f"ssm_bcdt_norm_eps must be in (0, 1); got {cfg.ssm_bcdt_norm_eps}")


def from_flat(cfg: Any, causal: bool = True) -> Mamba1:
    """The Mamba-1 mixer the flat fields describe (``causal`` false, an encoder's layer: refused by the mixer)."""
    rank = cfg.ssm_dt_rank if cfg.ssm_dt_rank is not None else math.ceil(cfg.d_model / 16)
    return Mamba1(cfg.d_model, cfg.ssm_inner, rank, cfg.ssm_state_size, cfg.ssm_conv_kernel, cfg.ssm_conv_bias,
                  cfg.ssm_bias, cfg.ssm_bcdt_norm, cfg.ssm_bcdt_norm_eps, cfg.ssm_state_dtype, causal)


KIND = register(MixerKind("Mamba1", Mamba1Fields, lambda cfg, i, causal: from_flat(cfg, causal), words=("mamba_one",),
                          check=check, group="state-space layers (Mamba-1)"))
