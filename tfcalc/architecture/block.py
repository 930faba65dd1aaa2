"""A block (one layer) and a stack of them, stored compactly as runs of a repeated pattern of blocks.

A ``Block`` is (a token mixer, optional cross-attention, FFN or mixture of experts, norms and where they
sit), as torchtitan's per-layer block configs (a mixer slot that holds an attention or a gated-DeltaNet
config) and litgpt's Block pick their attention and MLP classes. The mixer is anything that answers the
protocol of tfcalc.architecture.mixer (``Attention``, ``LatentAttention``, ...); ``block.attention`` is a
read-only alias of ``block.mixer`` kept for the readers that predate the slot, and ``Block(attention=...)``
or ``dataclasses.replace(block, attention=...)`` still set it. Norms sit:

- ``pre``: x + f(norm(x)) (GPT-2 onwards); ``post``: norm(x + f(x)) (Vaswani et al. 2017, BERT);
  ``sandwich``: x + norm2(f(norm1(x))) (Gemma 2, modeling_gemma2.py post_attention_layernorm; GLM-4's
  post_self_attn_layernorm and post_mlp_layernorm, modeling_glm4.py); ``output``: x + norm(f(x)), the
  sub-layer's output normed and its input not (OLMo 2, modeling_olmo2.py: post_attention_layernorm and
  post_feedforward_layernorm only; Groeneveld et al. 2025, "OLMo 2", sec. 3.2, "reordered norm");
  ``normed_residual``: h = norm(x), then α·h + f(h), the residual taken after the norm (MiniMax-01's
  ``postnorm``, modeling_minimax.py MiniMaxDecoderLayer: ``residual = hidden_states`` after input_layernorm;
  α ``residual_alpha``, its *_alpha_factor, with DeepNet's scaling of the residual, Wang et al. 2022);
- ``parallel``: x + attn(n1(x)) + ffn(n2(x)), with two norms (GPT-NeoX) or one shared (GPT-J, Falcon-7B).

``hyper`` (a ``Hyper`` of n streams): manifold-constrained hyper-connections (DeepSeek-V4; transformers 5.24
modeling_deepseek_v4.py, DeepseekV4HyperConnection, citing Xie et al. 2026): the residual stream is n streams
(B, T, n, d); before each sub-layer a projection of the n·d normed streams gives pre (n), post (n) and comb
(n × n) weights (``*_hc_fn`` (n(n + 2), n·d), ``*_hc_base`` (n(n + 2)), ``*_hc_scale`` (3)); the sub-layer
reads Σ pre_j · stream_j and the streams become post ⊗ output + combᵀ · streams (comb Sinkhorn-projected to
doubly stochastic). Matmuls: the projection (n·d -> n(n + 2)) and the stream mix, n × n @ n × d per token;
the rest is elementwise.

``shortcut`` (LongCat-Flash's shortcut-connected MoE, ScMoE: arXiv 2509.01322, sec. 2.1, Figure 2;
modeling_longcat_flash.py, LongcatFlashDecoderLayer): the block's FFN is a mixture of experts whose shared
expert is the block's dense FFN; both read the FFN norm's output, the shared part joins the stream here and the
routed part only after the next block's FFN (so the next block's attention runs beside the experts). One HF
LongCat layer is two blocks here: (latent attention, dense FFN + shortcut MoE) then (latent attention, dense FFN),
each attention with its own cache, as transformers' cache holds 2·num_layers layers. Every count reads the
block as any MoE block with a shared expert (the same tensors, matmuls and activations); only the torch
block (tfcalc.model.block) places the add.

A ``Stack`` holds its blocks as ``Run``s -- a pattern of blocks repeated -- so "the first 3 dense, then
58 MoE" (DeepSeek-V3) is two runs and "local, global" alternating (Gemma 2) one run of a two-block
pattern; ``layers()`` walks them one block per layer, which is all a fold needs.
Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Iterator, Literal, Optional, Union

from tfcalc.architecture.attention import Attention
from tfcalc.architecture.ffn import FFN, MoE
from tfcalc.architecture.mixer import Mixer, role_of
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.per_layer import AltUp, Laurel, PerLayerGate
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

Placement = Literal["pre", "post", "sandwich", "output", "normed_residual"]
Parallel = Literal["none", "shared_norm", "two_norms"]


@dataclass(frozen=True)
class Hyper:
    """Hyper-connections (module docstring): ``streams`` n, the Sinkhorn-Knopp iterations and epsilon of the mixing
    matrices (hc_sinkhorn_iters, hc_eps)."""

    streams: int
    sinkhorn_iters: int = 20
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if isinstance(self.streams, bool) or not isinstance(self.streams, int) or self.streams < 1:
            raise InputError(f"hyper-connection streams must be a positive integer; got {self.streams!r}")
        if isinstance(self.sinkhorn_iters, bool) or not isinstance(self.sinkhorn_iters, int) or \
                self.sinkhorn_iters < 1:
            raise InputError(f"hc_sinkhorn_iters must be a positive integer; got {self.sinkhorn_iters!r}")


@dataclass(frozen=True, init=False)
class Block:
    mixer: Mixer  # the token mixer (tfcalc.architecture.mixer): softmax or latent attention, ...
    ffn: Union[FFN, MoE]
    norm: Norm  # the kind every norm of the block has, d_model wide
    placement: Placement = "pre"
    parallel: Parallel = "none"
    cross_attention: Optional[Attention] = None
    residual_scale: Optional[float] = None  # each sub-layer's output times this before the add (Granite)
    residual_alpha: Optional[float] = None  # the residual times this before the add (MiniMax-01's alpha factors)
    hyper: Optional[Hyper] = None  # hyper-connections (DeepSeek-V4's; module docstring); None: one residual stream
    # the block's output, residual stream included, times a scalar of its own: Gemma 4's layer_scalar
    # (modeling_gemma4.py, Gemma4TextDecoderLayer), a buffer in the checkpoint, no parameter; one multiply
    layer_scalar: bool = False
    # its per-layer input, added after the FFN (Gemma 4's and Gemma 3n's PLE: tfcalc.architecture.per_layer)
    per_layer_input: Optional[PerLayerGate] = None
    # Gemma 3n: the block runs on the active one of AltUp's streams, with LAuReL beside its attention
    altup: Optional[AltUp] = None
    laurel: Optional[Laurel] = None
    shortcut: bool = False  # the routed experts' output joins after the next block's FFN (module docstring)

    def __init__(self, mixer: Optional[Mixer] = None, ffn: Union[FFN, MoE, None] = None, norm: Optional[Norm] = None,
                 placement: Placement = "pre", parallel: Parallel = "none", cross_attention: Optional[Attention] = None,
                 residual_scale: Optional[float] = None, hyper: Optional[Hyper] = None, *, attention: Any = None,
                 residual_alpha: Optional[float] = None, layer_scalar: bool = False,
                 per_layer_input: Optional[PerLayerGate] = None, altup: Optional[AltUp] = None,
                 laurel: Optional[Laurel] = None, shortcut: bool = False) -> None:
        """As the dataclass's own, and ``attention=`` the name the mixer slot had (it wins over ``mixer``, so
        ``dataclasses.replace(block, attention=a)``, which passes both, sets ``a``)."""
        mixer = mixer if attention is None else attention
        if mixer is None or ffn is None or norm is None:
            raise InputError("a block needs a token mixer, an FFN and a norm")
        for name, value in (("mixer", mixer), ("ffn", ffn), ("norm", norm), ("placement", placement),
                            ("parallel", parallel), ("cross_attention", cross_attention),
                            ("residual_scale", residual_scale), ("hyper", hyper), ("residual_alpha", residual_alpha),
                            ("layer_scalar", layer_scalar), ("per_layer_input", per_layer_input), ("altup", altup),
                            ("laurel", laurel), ("shortcut", shortcut)):
            object.__setattr__(self, name, value)
        self.__post_init__()

    @property
    def attention(self) -> Mixer:
        """The mixer, under the name it had before the slot (read-only)."""
        return self.mixer

    def __post_init__(self) -> None:
        if self.parallel != "none" and self.placement != "pre":
            raise InputError(f"parallel_block {self.parallel} needs norm_placement pre (got {self.placement}): "
                             "attention and FFN both read the block input")
        if self.residual_alpha is not None and self.placement != "normed_residual":
            raise InputError("residual_alpha scales the normed residual of norm_placement normed_residual "
                             f"(MiniMax-01's); got norm_placement {self.placement}")
        if self.shortcut and not (self.is_moe and self.placement == "pre" and self.parallel == "none"
                                  and self.residual_scale is None and self.cross_attention is None):
            raise InputError("a shortcut MoE block (LongCat-Flash's) needs a mixture of experts, norm_placement pre, "
                             "no parallel block, no residual_multiplier and no cross-attention")
        if self.parallel != "none" and self.cross_attention is not None:
            raise InputError("parallel_block with cross-attention is not supported: no model in use has it")
        plain = self.placement == "pre" and self.parallel == "none" and self.cross_attention is None
        if self.hyper is not None and not (plain and self.residual_scale is None):
            raise InputError("hyper-connections are built for pre-norm blocks of a mixer and an FFN only "
                             "(DeepSeek-V4's): no parallel block, cross-attention or residual scale")

    def __hash__(self) -> int:
        """The fields' hash, computed once: the folds key dicts by block (``Stack.kinds_in``, asked thousands
        of times by a plan's search), and a frozen dataclass's own hash walks every component each time."""
        try:
            return self.__dict__["_hash"]
        except KeyError:
            value = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", value)  # frozen: set once, never part of eq or repr
            return value

    def __getstate__(self) -> dict:
        """Pickled without the cached hash: string hashes differ from one process to the next."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def is_moe(self) -> bool:
        return isinstance(self.ffn, MoE)

    def norms(self) -> list[tuple[str, str]]:
        """(name, label) of the block's d_model-wide norms, in model order."""
        after = self.placement in ("sandwich", "output")  # a norm on the sub-layer's output
        before = self.placement != "output"  # a norm on its input (or, post-norm, on the sum)
        out = ([("attn_norm", "attention norm")] if before else []) + (
            [("attn_post_norm", "attention output norm")] if after else [])
        if not getattr(self.mixer, "sublayer", True) or getattr(self.mixer, "own_norm", False):
            out = []  # an FFN alone (Nemotron-H's - and E layers), or a mixer that norms its own input (Zamba2's)
        if self.cross_attention is not None:
            out += [("cross_attn_norm", "cross-attention norm")] if before else []
            out += [("cross_attn_post_norm", "cross-attention output norm")] if after else []
        if not self.is_moe and self.ffn.absent:  # a block of its mixer alone (Mamba2): no FFN norm
            return out
        out += [] if self.parallel == "shared_norm" or not before else [("ffn_norm", "FFN norm")]
        out += [("ffn_post_norm", "FFN output norm")] if after else []
        out += [("ple_post_norm", "per-layer input norm")] if self.per_layer_input is not None else []
        out += [("altup_router_norm", "AltUp router norm")] if self.altup is not None else []
        return out + ([("laurel_norm", "LAuReL norm")] if self.laurel is not None else [])

    def weights(self) -> list[Weight]:
        """Every tensor of the block, in model order, named as the breakdown names them."""
        norms = dict(self.norms())

        def norm(name: str) -> list[Weight]:
            return self.norm.weights(name, norms[name]) if name in norms else []

        part = role_of(self.mixer).params  # the reports' group of the mixer's tensors (its norms stay norms)
        mixer = [w.named("attn_") for w in self.mixer.weights()]
        if part != "attention":
            mixer = [replace(w, part=part) if w.role == "attention" else w for w in mixer]
        out = self.hyper_weights("attn", "attention") + norm("attn_norm") + mixer + norm("attn_post_norm")
        if self.cross_attention is not None:
            out += norm("cross_attn_norm") + [w.named("cross_attn_") for w in self.cross_attention.weights()]
            out += norm("cross_attn_post_norm")
        ffn = self.ffn.weights() if self.is_moe else [w.named("ffn_") for w in self.ffn.weights()]
        out += self.hyper_weights("ffn", "ffn") + norm("ffn_norm") + ffn + norm("ffn_post_norm")
        out += self.per_layer_input.weights(self.norm) if self.per_layer_input is not None else []
        out += self.altup.weights(self.norm) if self.altup is not None else []
        return out + (self.laurel.weights(self.norm) if self.laurel is not None else [])

    def hyper_weights(self, sub: str, role: str) -> list[Weight]:
        """A sub-layer's hyper-connection tensors (module docstring), none without ``hyper``."""
        if self.hyper is None:
            return []
        n, d = self.hyper.streams, self.mixer.d_model
        return [Weight(f"{sub}_hc_fn", (n * (n + 2), n * d), role, "hyper-connection projection"),
                Weight(f"{sub}_hc_base", (n * (n + 2),), role, "hyper-connection bias"),
                Weight(f"{sub}_hc_scale", (3,), role, "hyper-connection scales")]

    def hyper_linears(self, sub: str, role: str) -> list[Linear]:
        """A sub-layer's hyper-connection matmuls: the projection and the stream mix (n matmuls (1, n) @ (n, d)
        a token, counted as ``count`` n of (n_in n, n_out d))."""
        if self.hyper is None:
            return []
        n, d = self.hyper.streams, self.mixer.d_model
        return [Linear(f"{sub}_hc", role, "hyper-connection weights", n * d, n * (n + 2)),
                Linear(f"{sub}_hc_mix", role, "hyper-connection stream mix", n, d, count=n)]

    def linears(self, with_cross_kv: bool = True, step: bool = False) -> list[Linear]:
        """The block's projections and FFN matmuls (the position-mixing ones are the mixers' ``mixing``);
        ``step``: the mixer's in the form a decode step runs."""
        part = role_of(self.mixer).proj  # the reports' group of the mixer's projections
        out = [m.named("attn_") for m in self.mixer.linears(step=step)]
        if part != "attention_proj":
            out = [replace(m, part=part) if m.role == "attention_proj" else m for m in out]
        out = out + self.hyper_linears("attn", "attention_proj")
        if self.cross_attention is not None:
            out += [m.named("cross_attn_") for m in self.cross_attention.linears(with_cross_kv)]
        out += self.ffn.linears() if self.is_moe else [m.named("ffn_") for m in self.ffn.linears()]
        out += self.hyper_linears("ffn", "ffn")
        out += self.per_layer_input.linears() if self.per_layer_input is not None else []
        out += self.altup.linears() if self.altup is not None else []
        return out + (self.laurel.linears() if self.laurel is not None else [])


@dataclass(frozen=True)
class Run:
    """``pattern`` (one block or several) repeated ``repeat`` times."""

    pattern: tuple[Block, ...]
    repeat: int = 1

    def __post_init__(self) -> None:
        if not self.pattern or self.repeat < 1:
            raise InputError("a run of layers needs a pattern of at least one block, repeated at least once")


@dataclass(frozen=True)
class Stack:
    """One stack of blocks (a decoder's causal stack, an encoder's) with its embeddings and final norm.

    ``name`` is "" for a one-stack model, "encoder" or "decoder" in an encoder-decoder (the encoder's
    breakdown keys are prefixed ``encoder_``)."""

    runs: tuple[Run, ...]
    embeddings: "Embeddings"  # noqa: F821 (tfcalc.architecture.model; imported there to keep one direction)
    final_norm: Optional[Norm] = None
    name: Literal["", "encoder", "decoder"] = ""

    def __post_init__(self) -> None:
        if self.runs and self.runs[-1].pattern[-1].shortcut:
            raise InputError("LongCat-Flash's layers are pairs of blocks (the shortcut MoE of the first joins the "
                             "second): give an even n_layer (the last layer's shortcut MoE has no next layer to join)")

    @property
    def prefix(self) -> str:
        return "encoder_" if self.name == "encoder" else ""

    @property
    def n_layer(self) -> int:
        return sum(len(r.pattern) * r.repeat for r in self.runs)

    def layers(self) -> Iterator[Block]:
        """One block per layer, first to last."""
        for run in self.runs:
            for _ in range(run.repeat):
                yield from run.pattern

    def layer(self, i: int) -> Block:
        """Layer i's block (0-based), found from the runs in closed form."""
        pos = 0
        for run in self.runs:
            end = pos + len(run.pattern) * run.repeat
            if pos <= i < end:
                return run.pattern[(i - pos) % len(run.pattern)]
            pos = end
        raise IndexError(f"layer {i} of a {self.n_layer}-layer stack")

    def kinds(self) -> list[tuple[Block, int]]:
        """(distinct block, layers that are it), in first-seen order: what a fold multiplies out."""
        return self.kinds_in(0, self.n_layer)

    def kinds_in(self, start: int, stop: int) -> list[tuple[Block, int]]:
        """(distinct block, layers that are it) among layers start..stop-1, counted from the runs in closed
        form (a pipeline stage's share of a 2**40-layer stack costs no more than of a 2-layer one)."""
        counts: dict[Block, int] = {}
        pos = 0
        for run in self.runs:
            period, end = len(run.pattern), pos + len(run.pattern) * run.repeat
            lo, hi = max(start, pos), min(stop, end)
            for j, block in enumerate(run.pattern if lo < hi else ()):
                first = pos + j + period * max(0, -(-(lo - pos - j) // period))  # first i >= lo at offset j
                if first < hi:
                    counts[block] = counts.get(block, 0) + (hi - 1 - first) // period + 1
            pos = end
        return list(counts.items())


def compress(layers: list[Block]) -> tuple[Run, ...]:
    """Runs for a list of blocks: at each point, the pattern (of up to 8 blocks, repeated at least twice
    unless it is one block) whose repeats cover the most layers, the shorter pattern on a tie:
    [d, d, d, m, m, ...] -> (d)×3 (m)×58; [l, g, l, g] -> (l g)×2."""
    runs, i = [], 0
    while i < len(layers):
        best_p, best_n = 1, 1
        for p in range(1, min(8, len(layers) - i) + 1):
            pattern, n = layers[i:i + p], 1
            while layers[i + n * p:i + (n + 1) * p] == pattern:
                n += 1
            if (n > 1 or p == 1) and n * p > best_p * best_n:  # a pattern seen once is no pattern
                best_p, best_n = p, n
        runs.append(Run(tuple(layers[i:i + best_p]), best_n))
        i += best_p * best_n
    return tuple(runs)
