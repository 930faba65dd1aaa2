"""Zamba2's hybrid layer (Zyphra; transformers' models/zamba2/modeling_zamba2.py, Zamba2HybridLayer): a shared
transformer block, then the layer's own Mamba2 mixer. With h the residual stream and e the token embeddings (the
stack's input, kept beside it), d = d_model:

1. the shared block (Zamba2AttentionDecoderLayer), its weights SHARED by every hybrid layer that uses it (the
   hybrid layers take ``n_shared`` blocks in turn, use j the block j mod n_shared): u = RMSNorm_2d([h | e]);
   a = attention(u), Q, K and V 2d -> 2d over H heads of 2d / H (scores scaled by (head_dim / 2)^-1/2), O 2d -> d;
   m = MLP(RMSNorm_d(a)), a gated [gate | up] projection d -> 2f, act(gate)·up, down f -> d; no residual inside;
2. each use's own LoRA adapters (Hu et al. 2021), in transformers' lists of the block (one per hybrid layer):
   gate_up += B(A(x)) with A d -> r, B r -> 2f, and with ``attn_adapters`` Q, K, V each += B(A(u)), 2d -> r -> 2d;
3. the layer's own Linear d -> d of the block's output, t; then the Mamba2 layer on x = h + t:
   h = h + mamba(RMSNorm_d(h + t)) (Zamba2MambaDecoderLayer: the residual is h, not h + t).

The layer is one mixer slot (``Zamba2Hybrid``) in a block with no FFN: the mixer keeps its own norms (``own_norm``:
the block adds its output to h and norms nothing itself, tfcalc.architecture.block) and reads the embeddings
(``reads_embeddings``, tfcalc.model). Parameters shared between layers count once: a shared block's tensors are
listed by the first hybrid layer that uses it (its ``owner``), a later use lists only its adapters, its Linear and
its Mamba2 mixer; every use runs the block's matmuls (``linears``), so the FLOPs count it at each use, and each use
keeps its own K and V (transformers' cache holds them per layer) beside its Mamba2 state. Pure Python: no torch,
typer or rich here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from tfcalc.architecture import flat_attention, kinds, mamba2
from tfcalc.architecture.attention import Attention
from tfcalc.architecture.attention_ssm import AttentionSsmParts
from tfcalc.architecture.ffn import FFN
from tfcalc.architecture.kinds import MixerKind, register
from tfcalc.architecture.mixer import Elementwise, Mixing
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.saved import norm_bytes
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

SHARED = "shared_"  # the prefix of the shared block's names


@dataclass(frozen=True)
class Zamba2Hybrid(AttentionSsmParts):
    d_model: int
    attention: Attention  # its d_model the block's input width, 2d; O written here (2d -> d)
    mlp: FFN  # d -> f -> d, gated
    ssm: mamba2.Mamba2
    norm: Norm  # the kind of the block's RMSNorms (d wide; the attention's input norm 2d wide)
    shared_id: int = 0  # which shared block this use runs
    owner: bool = True  # the first use of its shared block: lists the shared tensors
    adapter_rank: int = 128
    attn_adapters: bool = False
    causal: bool = True
    # the adapter sets of the other uses of its block that this layer's copy holds, never run: with the blocks
    # untied (shared_untied), transformers' copy in every hybrid layer keeps the adapter lists of its block id whole
    spare_adapters: int = 0
    own_norm = True
    reads_embeddings = True
    module = "tfcalc.model.zamba2:Zamba2HybridModule"

    def __post_init__(self) -> None:
        if self.attention.d_model != 2 * self.d_model or self.attention.q_width != 2 * self.d_model:
            raise InputError("Zamba2's shared attention reads [h | embeddings], 2·d_model wide, in heads as wide")
        if self.attn_adapters and self.attention.k_width != 2 * self.d_model:
            raise InputError("Zamba2's K and V adapters add 2·d_model channels: n_kv_head must equal n_head")
        if self.adapter_rank < 1:
            raise InputError(f"shared_adapter_rank must be a positive integer; got {self.adapter_rank}")

    def _shared_weights(self) -> list[Weight]:
        d, a = self.d_model, self.attention
        out = dataclasses.replace(self.norm, width=2 * d).weights("in_norm", "shared block input norm")
        out += [Weight(f"{p}_weight", (w, 2 * d), "attention", f"shared attention {p.upper()} weight", "rows", "qkv")
                for p, w in (("q", a.q_width), ("k", a.k_width), ("v", a.v_width))]
        out.append(Weight("o_weight", (d, a.out_width), "attention", "shared attention O weight", "cols"))
        out += self.norm.weights("ff_norm", "shared block FFN norm")
        return [w.named(SHARED) for w in out] + [w.named(SHARED + "ffn_") for w in self.mlp.weights("shared FFN")]

    def _adapter_weights(self, prefix: str = "", suffix: str = "_adapter", what: str = "") -> list[Weight]:
        d, r, f = self.d_model, self.adapter_rank, self.mlp.d_ff
        pairs = [("gate_up", d, 2 * f)] + ([(p, 2 * d, 2 * d) for p in "qkv"] if self.attn_adapters else [])
        return [w for name, n_in, n_out in pairs for w in (
            Weight(f"{prefix}{name}{suffix}_0_weight", (r, n_in), "attention", f"{what}{name} LoRA adapter A weight"),
            Weight(f"{prefix}{name}{suffix}_1_weight", (n_out, r), "attention", f"{what}{name} LoRA adapter B weight"))]

    def weights(self) -> list[Weight]:
        """The shared block's (its owner only), the use's adapters and Linear, its Mamba2 input norm and mixer."""
        out = self._shared_weights() if self.owner else []
        out += self._adapter_weights()
        for k in range(self.spare_adapters):  # held, never run (the field's comment)
            out += self._adapter_weights(f"spare_adapters_{k}_", "", "unused copy's ")
        out.append(Weight("linear_weight", (self.d_model, self.d_model), "attention", "shared block output Linear"))
        out += self.norm.weights("ssm_norm", "Mamba2 input norm")
        return out + [w.named("ssm_") for w in self.ssm.weights()]

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        d, a, r, f = self.d_model, self.attention, self.adapter_rank, self.mlp.d_ff
        out = [Linear(SHARED + p, "attention_proj", f"shared attention {p.upper()}", 2 * d, w)
               for p, w in (("q", a.q_width), ("k", a.k_width), ("v", a.v_width))]
        for p in "qkv" if self.attn_adapters else "":
            out += [Linear(f"{p}_adapter_a", "attention_proj", f"{p.upper()} adapter A", 2 * d, r),
                    Linear(f"{p}_adapter_b", "attention_proj", f"{p.upper()} adapter B", r, 2 * d)]
        out.append(Linear(SHARED + "o", "attention_proj", "shared attention O", a.out_width, d))
        # the shared block's MLP and its adapter sit in the mixer slot: counted with the mixer's projections
        out += [dataclasses.replace(m.named(SHARED + "ffn_"), role="attention_proj")
                for m in self.mlp.linears("shared FFN")]
        out += [Linear("gate_up_adapter_a", "attention_proj", "gate_up adapter A", d, r),
                Linear("gate_up_adapter_b", "attention_proj", "gate_up adapter B", r, 2 * f),
                Linear("linear", "attention_proj", "shared block output Linear", d, d)]
        return out + self.ssm.linears(with_kv, step)

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        shared = [dataclasses.replace(m, name=SHARED + m.name) for m in self.attention.mixing(queries, keys, step)]
        return shared + self.ssm.mixing(queries, keys, step)

    def elementwise(self, queries: int, keys: int, step: bool = False) -> list[Elementwise]:
        """Both mixers', the MLP's activation (its gated product), the three RMSNorms (2d, d, d: 4 FLOPs an
        element) and the adds (h + t, the adapters' outputs)."""
        d, f = self.d_model, self.mlp.d_ff
        adds = queries * (d + 2 * f + (3 * 2 * d if self.attn_adapters else 0))
        return super().elementwise(queries, keys) + [
            Elementwise("ssm", "shared FFN activation and product", queries * f, per_element=5),
            Elementwise("ssm", "shared block and Mamba2 RMSNorms", queries * 4 * d, per_element=4),
            Elementwise("ssm", "adapter and stream adds", adds, per_element=1)]

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool,
              sources: Optional[int] = None) -> dict[str, int]:
        """Both mixers' terms (the block's norm and input terms stand for the Mamba2 norm of h + t and in_proj's
        input), and per token the shared block's own: the 2d-wide norm of [h | e] (norm_bytes: in fp32 the concat
        itself, 1/rms, x̂) and its output u (the Q, K, V and adapters' input, e·2d), the FFN norm of the attention's
        output and its output a (the MLP's and its adapter's input, e·d), the MLP's fused output, activation
        output and product (4·f·e), the adapters' inputs to B (r each) and the Linear's input (d·e). Exact against
        autograd in fp32 and bf16 (tests/model/test_zamba2.py)."""
        d, f, r = self.d_model, self.mlp.d_ff, self.adapter_rank
        out = super().saved(batch, seq, e, kernel, dropout)
        adapters = r * (1 + (3 if self.attn_adapters else 0))
        wide = dataclasses.replace(self.norm, width=2 * d)
        out["shared_block"] = (norm_bytes(wide, e) + e * 2 * d + norm_bytes(self.norm, e) + e * d
                               + e * (4 * f + adapters + d))
        return out

    def working_set(self, kernel: str, length: int, sources: Optional[int] = None) -> int:
        return super().working_set(kernel, length) + 4 * self.d_model + 2 * self.mlp.d_ff

    def tp_widths(self) -> list[tuple[str, int]]:
        return super().tp_widths() + [("d_ff", self.mlp.d_ff)]  # the shared block's MLP, split by d_ff


# ---- its flat fields (tfcalc.architecture.kinds): hybrid_pattern's letter H ----

@dataclass(frozen=True, kw_only=True)
class Zamba2Fields:
    # shared transformer blocks the H layers of hybrid_pattern take in turn (num_mem_blocks); None: no H layers
    shared_blocks: Optional[int] = None
    shared_adapter_rank: int = 128  # r of each use's LoRA adapters (adapter_rank)
    shared_attn_adapters: bool = False  # Q, K and V adapters too (use_shared_attention_adapter)
    # every H layer holds its own copy of its block (and of the block's adapter lists), the copies not tied:
    # transformers 5.24 ties Zamba2's shared blocks only where tie_word_embeddings is true (get_expanded_tied_
    # weights_keys returns no tie at all otherwise), and counts them so
    shared_untied: bool = False


def hybrid_layers(cfg: Any) -> list[int]:
    """The Zamba2 hybrid layers, in order: those a kind's per-layer plan fills with this kind (kinds.layer_plan:
    the Mamba2 kind's pattern letter H)."""
    return [i for i, slots in enumerate(kinds.layer_plan(cfg) or ()) if slots.mixer == "zamba"]


def check(cfg: Any) -> None:
    has = bool(hybrid_layers(cfg))
    if has and cfg.shared_blocks is None:
        raise InputError("the layer pattern has H (Zamba2 hybrid) layers: give shared_blocks")
    if cfg.shared_blocks is not None and (isinstance(cfg.shared_blocks, bool) or cfg.shared_blocks < 1):
        raise InputError(f"shared_blocks must be a positive integer; got {cfg.shared_blocks!r}")
    if cfg.shared_adapter_rank < 1:
        raise InputError(f"shared_adapter_rank must be a positive integer; got {cfg.shared_adapter_rank!r}")


def from_flat(cfg: Any, i: int, causal: bool) -> Zamba2Hybrid:
    """Layer i's hybrid mixer: its shared block (use j of the H layers runs block j mod shared_blocks; the first
    shared_blocks uses own them), the attention 2·d_model wide, the Mamba2 mixer of the ssm_* fields."""
    uses = hybrid_layers(cfg)
    j, n = uses.index(i), cfg.shared_blocks
    attention = dataclasses.replace(flat_attention.build(cfg, i, causal), d_model=2 * cfg.d_model)
    mlp = FFN(cfg.d_model, cfg.ffn_dim, True, cfg.activation, cfg.ffn_bias)
    norm = Norm(cfg.norm, cfg.d_model, cfg.norm_has_bias, cfg.norm_eps)
    spare = len(range(j % n, len(uses), n)) - 1 if cfg.shared_untied else 0
    return Zamba2Hybrid(cfg.d_model, attention, mlp, mamba2.from_flat(cfg), norm, j % n,
                        j < n or cfg.shared_untied, cfg.shared_adapter_rank, cfg.shared_attn_adapters, causal, spare)


KIND = register(MixerKind("Zamba2 hybrid", Zamba2Fields, from_flat, words=("zamba",), check=check,
                          group="Zamba2's shared transformer blocks (Zamba2Hybrid)"))
