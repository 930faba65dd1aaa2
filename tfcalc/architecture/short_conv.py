"""The short gated convolution: LFM2's token mixer (Liquid AI; transformers' modeling_lfm2.py ``Lfm2ShortConv``,
the same in modeling_lfm2_moe.py), in the layers ``layer_types`` marks "conv".

d = d_model channels, K = the kernel (``conv_L_cache``, 3 in every released LFM2). Per token x (d wide):

1. in_proj, d -> 3d, rows [B | C | x'] (one Linear; biases with ``conv_bias``);
2. the input gate: u = B ⊙ x' (d products);
3. a depthwise causal convolution over the positions: z_t = Σ_{j<K} w_j ⊙ u_{t-K+1+j}, the u before
   position 0 zero (``nn.Conv1d(d, d, K, groups=d)``; its bias with ``conv_bias``);
4. the output gate: y = C ⊙ z (d products), then out_proj, d -> d.

Nothing else mixes positions: no softmax, no rotary, no scores.

**FLOPs of step 3** (``mixing``): per channel, T outputs of K taps -- a (T, K) @ (K, 1) matmul, d copies, 2·d·K·T
FLOPs over a sequence of T, the taps over the zeros before position 0 included (the full-square convention
of attention: every output computes every tap); the causal-effective count leaves those out, Σ_t min(t + 1, K)
taps. FlopCounterMode on tfcalc's module sees exactly 2·d·K·T (a conv1d over T + K - 1 left-padded inputs, T
outputs: torch.utils.flop_counter's conv formula, 2 · out positions · d · K). transformers' torch path
(``causal_conv1d_fn``) pads K - 1 on both sides and drops the last K - 1 outputs, so FlopCounterMode on it sees
2·d·K·(T + K - 1): 2·d·K·(K - 1) more per sequence and conv layer, computed and thrown away, named apart in
the tests, never counted here. A decode step is one output: 2·d·K, reading the state (its causal count, at a
context under K, leaves out the taps over the zeros the state holds before position 0).

**The state** (``state``): transformers keeps K columns of u per conv layer (``conv_L_cache``: cache_utils.py
``LinearAttentionLayer.update_conv_state`` allocates (B, d, K)), though the next step needs only the K - 1
last inputs beside its own. tfcalc counts and allocates K, as transformers does: a step shifts its u into
the state's last column, then takes its one output over the K columns (one fixed-shape conv; keeping K - 1
would need a concatenation of the state and the new input every step, a copy of the state per layer and
token, to save d elements). So the bytes counted are transformers' cache bytes, in the model's activation
dtype (``dtype="model"``: transformers' and tfcalc's runtime allocate it so; an FP8 KV cache, ``--kv-dtype``,
leaves it in the model's dtype). The state has no positions: it does not grow with the context.

**Rewind**: refused. The state holds the last K inputs, overwritten every step; returning to an earlier
position needs inputs it no longer holds (transformers can rewind only while recording every past input,
``record_past``, a state that grows with the tokens -- not this one).

**TP**: by channel, as Megatron splits heads: in_proj's rows, the convolution's channels, out_proj's columns;
every rank its d/t channels of B, C, x', the state and the gates (``tp_widths``: d must divide). Context
parallelism would need each rank's K - 1 inputs before its slice: not modelled (refused).

Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tfcalc.architecture.kinds import MixerKind, register
from tfcalc.architecture.mixer import Capabilities, EagerOp, Elementwise, MixerRole, Mixing, StateTensor
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

# what the reports call its parts (tfcalc.architecture.mixer, 10.): in_proj and out_proj, and the depthwise
# convolution with its gates, the only position mixing of the layer
ROLE = MixerRole("conv", "Short conv", "conv_proj", "Short-conv projections", "conv", "Short conv (depthwise)",
                 "short-conv", (("qkv", "short conv: in_proj output [B | C | x]"),
                                ("attn_output", "short conv: out_proj input")))


def conv_taps(queries: int, keys: int, kernel: int) -> int:
    """Taps over real inputs of the last ``queries`` of ``keys`` positions: position p reads min(p + 1, K)
    (the K - 1 before position 0 are the zero padding)."""
    def upto(n: int) -> int:  # Σ_{p < n} min(p + 1, K)
        small = min(n, kernel)
        return small * (small + 1) // 2 + kernel * (n - small)
    return upto(keys) - upto(keys - queries)


@dataclass(frozen=True)
class ShortConv:
    d_model: int
    kernel_size: int = 3  # K: conv_L_cache
    bias: bool = False  # conv_bias: in_proj, the convolution and out_proj alike (modeling_lfm2.py)
    causal: bool = True

    role = ROLE
    module = "tfcalc.model.short_conv:ShortConvModule"  # resolved by tfcalc.model.mixers (no torch here)

    def __post_init__(self) -> None:
        if self.d_model < 1:
            raise InputError(f"a short convolution's d_model must be positive; got {self.d_model}")
        if isinstance(self.kernel_size, bool) or not isinstance(self.kernel_size, int) or self.kernel_size < 1:
            raise InputError(f"conv_kernel (the short convolution's taps, conv_L_cache) must be a positive integer; "
                             f"got {self.kernel_size!r}")
        if not self.causal:
            raise InputError("a short convolution mixes causally: it has no bidirectional form (arch encoder)")

    def weights(self) -> list[Weight]:
        """in_proj (3d, d), the depthwise kernel (d, 1, K) as nn.Conv1d stores it, out_proj (d, d); biases."""
        d, k = self.d_model, self.kernel_size
        out = [Weight("in_proj_weight", (3 * d, d), "attention", "short conv in_proj [B | C | x] weight", "rows")]
        out += [Weight("in_proj_bias", (3 * d,), "attention", "short conv in_proj bias", "rows")] if self.bias else []
        out.append(Weight("conv_weight", (d, 1, k), "attention", "short conv kernel", "rows"))
        out += [Weight("conv_bias", (d,), "attention", "short conv kernel bias", "rows")] if self.bias else []
        out.append(Weight("out_proj_weight", (d, d), "attention", "short conv out_proj weight", "cols"))
        # added once after the row-parallel reduction: whole on every rank
        return out + ([Weight("out_proj_bias", (d,), "attention", "short conv out_proj bias")] if self.bias else [])

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        d = self.d_model
        # the output projection last (the protocol: the FLOP table shows ``mixing`` just before it); named "o"
        # as attention's is, so that the checkpoint and breakdown names read alike
        return [Linear("in_proj", "attention_proj", "in_proj (B, C, x)", d, 3 * d),
                Linear("o", "attention_proj", "out_proj", d, d)]

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """Step 3 for one sequence: per channel (T, K) @ (K, 1), d copies (see the module docstring); a decode
        step reads the K columns of the state."""
        d, k = self.d_model, self.kernel_size
        read = d * k if step else 0
        return [Mixing("conv", "depthwise causal conv", (queries, k, 1), d, 2 * d * conv_taps(queries, keys, k),
                       read, "model", io=2 * queries * d)]  # u read, z written: the taps' window stays in cache

    def elementwise(self, queries: int, keys: int) -> list[Elementwise]:
        """The two gates (steps 2 and 4), one product each per channel; bias adds with ``bias``."""
        d = self.d_model
        out = [Elementwise("gates", "B·x and C·conv gates", queries * 2 * d, per_element=1)]
        return out + ([Elementwise("bias", "bias adds", queries * 5 * d)] if self.bias else [])

    def kernel(self, explicit_mask: bool) -> str:
        return "flash"  # no (T, T) tensor is ever written

    def mask_span(self, length: int) -> tuple[None, None]:
        return None, None

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool) -> dict[str, int]:
        """Per token, what autograd keeps (tfcalc.model.short_conv's forward): in_proj's output [B | C | x'] whole
        (the gates keep views of it), u (the convolution's input, left-padded: the K - 1 zeros per sequence are
        left out), z (the output gate's other operand) and y (out_proj's input)."""
        d = self.d_model
        return {"qkv": e * 3 * d, "conv": e * 2 * d, "attn_output": e * d}

    def working_set(self, kernel: str, length: int) -> int:
        return 6 * self.d_model  # [B | C | x'], u, z, y (contiguous for out_proj)

    def eager_ops(self, tokens: int) -> list[EagerOp]:
        """Forward: the two gates (read 2, write 1 each), u's left pad and y's copy to contiguous (read 1, write
        1): 10 per channel in 4 kernels. Back: each gate's two products (read 3, write 2), the pad's slice and
        the copy (2 each), and [dB | dC | dx'] concatenated for in_proj (2 per element of 3d): 20, in 6."""
        d = self.d_model
        return [EagerOp("moves", "qkv", 10 * tokens * d, 20 * tokens * d, 4, 6),
                EagerOp("bias_linears", "bias", 2 if self.bias else 0)]

    def state(self) -> list[StateTensor]:
        """K columns of u per channel, fixed, in the model's dtype (see the module docstring)."""
        d, k = self.d_model, self.kernel_size
        return [StateTensor("conv", fixed=d * k, dtype="model", shape=(d, k))]

    def expanded_state(self) -> list[StateTensor]:
        return self.state()

    def tp_widths(self) -> list[tuple[str, int]]:
        return [("d_model (short conv channels)", self.d_model)]

    def tp_state_heads(self) -> Optional[int]:
        return self.d_model  # the state splits by channel

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(rewind=False, tensor_parallel=True, context_parallel=False)


@dataclass(frozen=True, kw_only=True)
class ShortConvFields:
    """Its flat fields (tfcalc.architecture.kinds), in the layers layer_pattern calls "conv"."""

    conv_kernel: int = 3  # its taps K (conv_L_cache)
    conv_bias: bool = False  # biases on its in_proj, convolution and out_proj (conv_bias)


def from_flat(cfg: Any, i: int, causal: bool) -> ShortConv:
    return ShortConv(cfg.d_model, cfg.conv_kernel, cfg.conv_bias, causal)


KIND = register(MixerKind("short convolution", ShortConvFields, from_flat, words=("conv",),
                          group="short gated convolution in the layer_pattern's conv layers (ShortConv)"))
