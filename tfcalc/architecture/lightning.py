"""Lightning attention: MiniMax-01's linear attention with a per-head exponential decay (MiniMax, "MiniMax-01:
Scaling Foundation Models with Lightning Attention", arXiv 2501.08313, sec. 2.2; Qin et al., "Lightning
Attention-2", arXiv 2401.04658), as transformers 5.24 runs it (modeling_minimax.py, MiniMaxLightningAttention).
A token mixer of a FIXED-SIZE state: no K/V cache grows with the context.

Sizes: H heads of d channels (``num_attention_heads``, ``head_dim``: the softmax layers' own), b the block
(``block_size``, 256). Per token x (d_model wide):

1. ``qkv_proj`` d_model -> 3·H·d, no bias, then SiLU (``hidden_act``); per head [q | k | v] (the rows grouped
   by head: reshape (B, T, H, 3d), split d); no scaling, no norm of q or k, no rotary;
2. the decay of head h in layer l of L: λ = exp(-s), s = (2^(-8/H))^(h+1) · (1 - l / (L - 1 + 1e-5) + 1e-5)
   (get_slope_rate: ALiBi's slopes, shrinking with depth);
3. causal linear attention with that decay: S_t = λ·S_{t-1} + k_tᵀ·v_t, o_t = q_t·S_t. A forward pass runs it
   in blocks of b (the last block the T mod b left, never padded), per block of c tokens and head:
   (a) intra, ((Q·Kᵀ) ⊙ D)·V with D_ij = λ^(i-j) for j <= i, else 0: (c, d) @ (d, c), then (c, c) @ (c, d);
   (b) inter, (Q ⊙ λ^(i+1))·S: (c, d) @ (d, d); (c) the state, S·λ^c + (K ⊙ λ^(c-1-j))ᵀ·V: (d, c) @ (c, d).
   Every block runs all four, the first (S zero) included, as transformers does (FlopCounterMode sees them).
   A decode step runs the recurrent form on one token: kᵀ·v (d, 1) @ (1, d) and q·S (1, d) @ (d, d);
4. the output: an RMSNorm over all H·d channels (``norm``, eps 1e-6: MiniMaxRMSNorm's default, the config's
   rms_norm_eps not passed), times sigmoid(``output_gate``(x)) (d_model -> H·d, no bias), then ``out_proj``
   H·d -> d_model.

Generation state per sequence and layer (``state``): S, H·d·d, allocated once, in the model's dtype
(transformers' cache keeps the tensor its blocks return, created as ``torch.zeros(..., dtype=value_states.dtype)``).
It does not grow with the context and cannot rewind. TP splits by heads (qkv_proj's and output_gate's rows,
out_proj's columns, the state), but the output RMSNorm's statistic spans every head: a rank needs the others'
sums of squares, one small all-reduce per layer not priced here. Context parallelism (LASP, sec. 3 of the
paper) is not modelled (refused). Pure Python: no torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Optional

from tfcalc.architecture import lightning_eager
from tfcalc.architecture.kinds import MixerKind, register
from tfcalc.architecture.mixer import Capabilities, EagerOp, Elementwise, Mixing, StateTensor
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

BLOCK = 256  # MiniMaxConfig.block_size's default
NORM_EPS = 1e-6  # MiniMaxRMSNorm(head_dim * num_attention_heads): its default eps, not rms_norm_eps


@dataclass(frozen=True)
class Lightning:
    d_model: int
    n_head: int
    head_dim: int
    block: int = BLOCK
    causal: bool = True
    module = "tfcalc.model.lightning:LightningModule"

    def __post_init__(self) -> None:
        for name in ("d_model", "n_head", "head_dim", "block"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"lightning attention {name} must be a positive integer; got {value!r}")
        if not self.causal:
            raise InputError("lightning attention mixes causally: it has no bidirectional form (arch encoder)")

    @property
    def width(self) -> int:
        return self.n_head * self.head_dim

    def weights(self) -> list[Weight]:
        """Step 1 and 4, named as transformers names them (MiniMaxLightningAttention)."""
        d, w = self.d_model, self.width
        return [Weight("qkv_proj_weight", (3 * w, d), "attention", "lightning Q, K, V projection", "rows"),
                Weight("output_gate_weight", (w, d), "attention", "lightning output gate", "rows"),
                Weight("norm_weight", (w,), "norms", "lightning output RMSNorm weight", "rows"),
                Weight("out_proj_weight", (d, w), "attention", "lightning output projection", "cols")]

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        d, w = self.d_model, self.width
        return [Linear("qkv_proj", "attention_proj", "Q, K, V projection", d, 3 * w),
                Linear("output_gate", "attention_proj", "output gate", d, w),
                # named "o": the FLOP fold places a mixer's position mixing before its Linear "o"
                Linear("o", "attention_proj", "output projection (out_proj)", w, d)]

    def blocks(self, tokens: int) -> list[tuple[int, int]]:
        """(block length c, how many) of a forward over ``tokens``: the whole blocks, then the rest."""
        whole, rest = divmod(tokens, self.block)
        return [(c, n) for c, n in ((self.block, whole), (rest, 1)) if c and n]

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """Step 3 for one sequence of ``queries`` new tokens (module docstring). A decode step of one token: the
        recurrent form, reading S; a step of several tokens (a verify) and a forward pass: the block form over
        blocks of b. Causal FLOPs: the c(c+1)/2 pairs of each block's Q·Kᵀ and scores·V on or below the
        diagonal; the inter-block products and the state update as they are."""
        H, d = self.n_head, self.head_dim
        S = H * d * d
        if step and queries == 1:
            return [Mixing("update", "recurrent state update kᵀ·v", (d, 1, d), H, 2 * d * d * H, S, "model"),
                    Mixing("qS", "recurrent q·S", (1, d, d), H, 2 * d * d * H)]
        out = []
        for c, n in self.blocks(queries):
            tri, tail = c * (c + 1) // 2, "" if c == self.block else "_tail"
            label = "" if c == self.block else " (last block)"
            for name, what, shape, causal in (("qk", "block Q·Kᵀ", (c, d, c), 2 * tri * d),
                                              ("av", "block decayed scores · V", (c, c, d), 2 * tri * d),
                                              ("inter", "block decayed Q · S", (c, d, d), 2 * c * d * d),
                                              ("update", "block state update Kᵀ·V", (d, c, d), 2 * c * d * d)):
                read = S * n if step and name == "inter" else 0
                out.append(Mixing(name + tail, what + label, shape, H * n, causal * H * n, read,
                                  "model" if read else None))
        return out

    def elementwise(self, queries: int, keys: int) -> list[Elementwise]:
        """Non-matmul work per token, at the FLOPs each op does per element (a declared convention, not a
        measurement): SiLU on [Q | K | V] (4: exp, add, divide, multiply); the block's decay products -- the
        c×c scores times D (1 a pair), Q and K times their decays (1 each), intra + inter (1), S times λ^c
        once a block (1 per state element); the output RMSNorm (4) and the sigmoid gate and its product (5)."""
        H, d, t = self.n_head, self.head_dim, queries
        pairs = sum(c * c * n for c, n in self.blocks(t)) * H
        states = sum(n for _, n in self.blocks(t)) * H * d * d
        return [Elementwise("qkv_silu", "SiLU on Q, K, V", t * 3 * self.width, per_element=4),
                Elementwise("decay", "block decays (scores, Q, K, sums, state)", pairs + 3 * t * self.width + states,
                            per_element=1),
                Elementwise("gated_norm", "output RMSNorm and sigmoid gate", t * self.width, per_element=9)]

    def kernel(self, explicit_mask: bool) -> str:
        return "math"  # the block's c×c scores are written out

    def mask_span(self, length: int) -> tuple[None, None]:
        return None, None

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool) -> dict[str, Fraction]:
        """Bytes per token autograd keeps for the backward pass of tfcalc's module (tfcalc.model.lightning) over
        ``batch`` sequences of T = ``seq`` tokens, split by heads under TP (H heads of d, w = H·d, F = 4; the T
        tokens in n blocks of b, the last c_n = T - (n - 1)·b of them, never padded):

        - ``qkv``: the projection's output (SiLU's input) and the contiguous Q, K and V the blocks read, e·3w each;
        - ``attn_scores``, per sequence: each block's scores Q·Kᵀ (c_i², kept by the decayed product's matmul),
          the state it starts from (d²), after the first block Q times its decays (c_i·d; the first block's
          product with the zero state needs no gradient for Q) and before the last K times its decays (c_i·d,
          the state update; none after the last block, tfcalc.model.lightning.blocks ``final``), e·H each; per
          micro-batch the decays of each block length (D, c², and Q's, c; K's, c, where a block of that length
          updates the state; the whole block's λ^b, 1, from three blocks on), e·H each;
        - ``attn_output``: the output heads (the norm's fp32 input, F·w) and 1/rms (F), the normed output (F·w in
          fp32, e·w below), the weighted output, the gate's sigmoid and out_proj's input (3e·w).

        Terms that do not grow with each token are exact fractions of one. Checked against the tensors autograd
        saves (tests/test_minimax.py), fp32 and bf16, at one block, whole blocks and a short last one: equal to
        the byte."""
        F, H, d, b, w = 4, self.n_head, self.head_dim, self.block, self.width
        n = -(-seq // b)
        sizes = [min(b, seq - i * b) for i in range(n)]
        blocks = sum(c * c + d * d + (i >= 1) * c * d + (i < n - 1) * c * d for i, c in enumerate(sizes))
        updates: dict[int, bool] = {}  # each block length's decays, K's kept where such a block updates S
        for i, c in enumerate(sizes):
            updates[c] = updates.get(c, False) or i < n - 1
        decays = sum(c * c + c + (c if kd else 0) for c, kd in updates.items()) + (1 if n >= 3 else 0)
        scores = Fraction(e * H * blocks, seq) + Fraction(e * H * decays, batch * seq)
        out = F * w + F + (F * w if e == F else e * w) + 3 * e * w
        return {"qkv": 6 * e * w, "attn_scores": scores, "attn_output": out}

    def working_set(self, kernel: str, length: int) -> int:
        """Elements per token alive at once in the mixer: [Q | K | V] twice, a block's scores rows, the outputs."""
        return 6 * self.width + 2 * self.n_head * self.block + 4 * self.width  # the scores and their decayed copy

    def eager_ops(self, tokens: int, step: bool = False) -> list[EagerOp]:
        """The aten ops tfcalc's module runs on every token beside its matmuls, forward and backward, one a kernel
        (tfcalc.architecture.lightning_eager, checked op for op against the module's dispatches); the block scan's
        own kernels, which grow with the blocks, are ``scan_eager_ops``'s."""
        return lightning_eager.ops(self, tokens)

    def scan_eager_ops(self, batch: int, seq: int) -> list[EagerOp]:
        """The block scan's eager ops in training over ``batch`` sequences of ``seq`` tokens, whole: their kernels
        grow with a sequence's blocks, not with the tokens (tfcalc.architecture.lightning_eager.scan)."""
        return lightning_eager.scan(self, batch, seq)

    def state(self) -> list[StateTensor]:
        """S per head (d × d), the model's dtype (module docstring)."""
        H, d = self.n_head, self.head_dim
        return [StateTensor("recurrent", fixed=H * d * d, dtype="model", shape=(H, d, d))]

    def expanded_state(self) -> list[StateTensor]:
        return self.state()

    def tp_widths(self) -> list[tuple[str, int]]:
        return [("n_head (lightning heads)", self.n_head)]

    def tp_state_heads(self) -> Optional[int]:
        return self.n_head

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(rewind=False, tensor_parallel=True, context_parallel=False, training_kernels="fused",
                            op_recompute="lightning attention's block scan")


# ---- its flat fields (tfcalc.architecture.kinds): the layers layer_pattern calls "lightning" ----

@dataclass(frozen=True, kw_only=True)
class LightningFields:
    lightning_block_size: Optional[int] = None  # MiniMax's block_size; None: 256
    # MiniMax-01's residual weights (modeling_minimax.py, MiniMaxDecoderLayer: the *_alpha_factor keys): with
    # norm_placement normed_residual each sub-layer computes alpha·h + residual_multiplier·f(h), h its normed input;
    # None: 1
    residual_alpha: Optional[float] = None


def from_flat(cfg: Any, i: int, causal: bool) -> Lightning:
    return Lightning(cfg.d_model, cfg.n_head, cfg.head_dim, cfg.lightning_block_size or BLOCK, causal)


KIND = register(MixerKind("lightning attention", LightningFields, from_flat, words=("lightning",),
                          group="lightning attention in the layer_pattern's lightning layers (MiniMax-01)"))
