"""Feed-forward sub-layers: a dense FFN (plain or gated) and a mixture of experts.

1. dense: up d -> f, activation, down f -> d (Vaswani et al. 2017, sec. 3.3); gated (SwiGLU, GeGLU;
   Shazeer 2020) adds a gate d -> f and computes down(act(gate(x)) · up(x));
2. mixture of experts: a bias-free router d -> E picks k of E expert FFNs per token (Mixtral, Jiang et al.
   2024, sec. 2.1); each token runs its k experts only; an optional shared expert runs on every token,
   optionally scaled by sigmoid(Linear(d, 1)) (Qwen2-MoE, modeling_qwen2_moe.py; DeepSeekMoE, Dai et al.
   2024); with a capacity factor c each expert multiplies a buffer of ceil(c·k·tokens / E) rows (Fedus et
   al. 2022, Switch Transformers, sec. 2.2); the router may have a bias (gpt-oss), and the experts'
   weights may be stored as MXFP4 (``weight_format``: 4-bit values, one 8-bit scale per 32; gpt-oss).
3. xIELU (Huang et al. 2024, arXiv 2411.13010; Apertus, transformers' activations.py XIELUActivation):
   with α_p = softplus(a_p), α_n = β + softplus(a_n), act(x) = α_p·x² + β·x for x > 0, else
   (expm1(min(x, eps)) − x)·α_n + β·x; a_p and a_n are learned parameters of shape (1,) each in every FFN
   (registered as nn.Parameter, so counted); β = 0.5 and eps = −1e-6 are buffers (not counted);
4. gpt-oss's clamped SwiGLU (modeling_gpt_oss.py, GptOssExperts._apply_gate): with ``swiglu_limit`` L and
   ``swiglu_alpha`` a, hidden = g·sigmoid(a·g) · (u + 1) with g = min(gate, L), u = clamp(up, -L, L);
   the same matmuls as any gated FFN. With L and no a: DeepSeek-V4's, silu(min(gate, L)) · clamp(up, -L, L)
   (modeling_deepseek_v4.py, DeepseekV4MLP and DeepseekV4Experts._apply_gate).
5. Gemma 4's experts beside its MLP (``beside_mlp``; modeling_gemma4.py Gemma4TextDecoderLayer, enable_moe_block):
   the shared FFN is the dense MLP, on the block's normed input, its output normed (mlp_post_norm); the router
   reads the block's input before its norm: RMS-normed without a weight, times a learned ``router_scale`` (d) and
   d^-1/2, then d -> E, a softmax over all E, the top k renormalized, each times its expert's learned
   ``per_expert_scale`` (E); the experts read the input through a norm of their own (moe_pre_norm) and their sum
   is normed (moe_post_norm); the two outputs are added before the block's FFN output norm.
6. zero-computation experts (LongCat-Flash, arXiv 2509.01322, sec. 2.1; modeling_longcat_flash.py,
   LongcatFlashExperts): ``n_zero`` identity experts beside the E real ones; the router scores all E + Z
   (its weight (E + Z, d), its correction bias E + Z values) and a token routed to one adds its input times
   the routing weight: no weight, no matmul. How many of a token's k picks land on real experts is the
   learned router's choice (the paper steers its mean with a PID-controlled bias, sec. 2.1, "Computational
   budget control"), unknowable from the config: every count here (active parameters, FLOPs, expert rows)
   takes the upper bound, all k on real experts -- the figure a deployment must provision for, and what
   tfcalc's module runs (tfcalc.model.experts: an identity pick multiplies through an expert at weight 0,
   so no shape depends on the routing). The paper's mean (about 8 of 12, sec. 2.1) is a measurement, not
   a count.
7. latent MoE (Nemotron 3 Super; modeling_nemotron_h.py, NemotronHMoE, moe_latent_size; Megatron-Core's
   ``moe_latent_size``, megatron/core/transformer/moe/moe_layer.py, MoELayer): the router and the shared expert
   read the block's d-wide input, the routed tokens are projected d -> L (``latent_in``, fc1_latent_proj) before
   the experts, which work in L (their up (f, L), down (L, f): ``expert.d_model`` is L), and their weighted sum
   L -> d (``latent_out``, fc2_latent_proj) after; both projections carry a bias when the experts' FFN does
   (transformers' mlp_bias) and are whole on every tensor-parallel rank (Megatron-Core's parallel_mode
   "duplicated"). The projection runs once per token, not per routed pair, before the dispatch
   (MoELayer.router_and_preprocess: fc1_latent_proj, then the dispatcher; the combine, then fc2_latent_proj): the
   tokens that cross an all-to-all under expert parallelism are L wide (``dispatch_width``).

Both list their tensors (``weights``) and matmuls (``linears``), which every fold reads. Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, Optional

from tfcalc.architecture.norm import Norm
from tfcalc.architecture.routing import Routing
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

Activation = Literal["gelu", "gelu_tanh", "relu", "relu2", "silu", "xielu"]


@dataclass(frozen=True)
class FFN:
    d_model: int
    d_ff: int
    gated: bool = False
    activation: Activation = "gelu"
    bias: bool = True
    swiglu_limit: Optional[float] = None  # gpt-oss's clamped SwiGLU (step 4); None: the plain gated FFN
    swiglu_alpha: Optional[float] = None
    # false: the block has no FFN sub-layer (a Mamba2 block is its norm and mixer alone, modeling_mamba2.py
    # Mamba2Block; Nemotron-H's M and * layers): d_ff 0, no tensors, no matmuls, no norm, no residual add
    present: bool = True
    # (gate, down): the gate projection's output times the first before the activation, the FFN's output times the
    # second (Falcon-H1's muP mlp_multipliers, modeling_falcon_h1.py FalconH1MLP); None: no multiply
    multipliers: Optional[tuple[float, ...]] = None
    # Gemma 3n's activation sparsity (modeling_gemma3n.py Gemma3nTextMLP._gaussian_topk): the gate's outputs below
    # mean + std·Φ⁻¹(s) over each token's d_ff set to 0 (relu of the difference) before the activation; 0: none
    sparsity: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.sparsity < 1 or (self.sparsity and not self.gated):
            raise InputError(f"activation sparsity is a share in [0, 1) of a gated FFN's gate; got {self.sparsity}")
        if self.d_model < 1 or (self.d_ff < 1 if self.present else self.d_ff != 0):
            raise InputError(f"an FFN needs positive widths; got d_model {self.d_model}, d_ff {self.d_ff}")

    @property
    def absent(self) -> bool:
        return not self.present

    @property
    def matrices(self) -> int:
        """d×f matrices it multiplies by: 3 gated (gate, up, down), else 2."""
        return 3 if self.gated else 2

    def weights(self, label: str = "FFN", copies: int = 1, experts_active: Optional[int] = None) -> list[Weight]:
        """Gate (gated only), up and down, weights then biases; [gate | up] stored as one tensor."""
        d, f, out = self.d_model, self.d_ff, []
        if self.absent:
            return []
        more = dict(copies=copies, experts_active=experts_active)
        tp = lambda split: None if experts_active else split  # noqa: E731 (experts stay whole under TP, for now)
        for part in ("gate", "up") if self.gated else ("up",):
            out.append(Weight(f"{part}_weight", (f, d), "ffn", f"{label} {part} weight", tp("rows"), "up", **more))
            if self.bias:
                out.append(Weight(f"{part}_bias", (f,), "ffn", f"{label} {part} bias", tp("rows"), "up", **more))
        out.append(Weight("down_weight", (d, f), "ffn", f"{label} down weight", tp("cols"), **more))
        if self.bias:
            out.append(Weight("down_bias", (d,), "ffn", f"{label} down bias", **more))
        if self.activation == "xielu":  # step 3: two learned scalars, replicated under TP
            out += [Weight(f"act_{a}", (1,), "ffn", f"{label} xIELU {a}", **more) for a in ("alpha_p", "alpha_n")]
        return out

    def linears(self, label: str = "FFN", rows: str = "tokens") -> list[Linear]:
        d, f = self.d_model, self.d_ff
        if self.absent:
            return []
        out = [Linear("gate", "ffn", f"{label} gate", d, f, rows)] if self.gated else []
        return out + [Linear("up", "ffn", f"{label} up", d, f, rows),
                      Linear("down", "ffn", f"{label} down", f, d, rows)]


# step 5's norms, each d wide: the MLP's output, the experts' input and their output
BESIDE_NORMS = (("mlp_post_norm", "MLP output norm"), ("moe_pre_norm", "experts' input norm"),
                ("moe_post_norm", "experts' output norm"))


@dataclass(frozen=True)
class MoE:
    expert: FFN  # every routed expert has this shape
    n_expert: int
    top_k: int
    shared: Optional[FFN] = None
    shared_gate: bool = False
    renormalize: bool = True  # renormalize the k chosen weights (Mixtral); false: Qwen2-MoE's raw softmax
    capacity_factor: Optional[float] = None  # None: dropless
    router_bias: bool = False  # gpt-oss's router has a bias (GptOssTopKRouter.bias)
    weight_format: Optional[str] = None  # "mxfp4": the routed experts' weight matrices as stored (step 2)
    routing: Routing = Routing()  # DeepSeek's grouped, sigmoid, biased, scaled routing (architecture.routing)
    # Llama 4 (modeling_llama4.py, Llama4Router): the sigmoid of each chosen logit scales the token's
    # input to that expert, not its output (tfcalc.model.routing_input)
    sigmoid_input: bool = False
    # DeepSeek-V4's hash-routed layers (transformers' mlp_layer_types "hash_moe", DeepseekV4HashRouter): each
    # token's experts are a frozen table's row for its token id, ``tid2eid`` (vocab, k), a buffer (not counted as
    # a parameter, stored in checkpoints); the router's scores still weigh them. 0: learned top-k routing; else
    # the vocabulary the table covers
    hash_vocab: int = 0
    # step 5 (Gemma 4): the shared FFN is the MLP, with the router's scales and three norms of this kind (d wide)
    beside_mlp: Optional[Norm] = None
    n_zero: int = 0  # zero-computation (identity) experts beside the n_expert real ones (step 6)
    # step 7: the block's width d when the routed experts work in a latent width (expert.d_model, L); 0: none
    latent_from: int = 0

    def __post_init__(self) -> None:
        if self.beside_mlp is not None and (self.shared is None or self.shared_gate or not self.routing.is_default
                                or self.sigmoid_input or not self.renormalize):
            raise InputError("Gemma 4's experts beside the MLP need the MLP as the shared expert (shared_expert_d_ff), "
                             "no shared gate, and a softmax router renormalizing its top k")
        if self.n_expert < 1 or self.top_k < 1:
            raise InputError(f"a mixture of experts needs n_expert and n_expert_active of at least 1; got "
                             f"{self.n_expert}, {self.top_k}")
        if self.n_zero < 0:
            raise InputError(f"zero-computation experts must be 0 or more; got {self.n_zero}")
        if self.top_k > self.n_expert:  # with zero experts too: the upper bound (step 5) is k real ones
            raise InputError(f"n_expert_active ({self.top_k}) must not exceed n_expert ({self.n_expert})")
        if self.n_zero and (self.capacity_factor is not None or self.sigmoid_input):
            raise InputError("zero-computation experts are built dropless, with the weights on the outputs "
                             "(LongCat-Flash's): no expert_capacity_factor, no router_sigmoid_input")
        if self.shared_gate and self.shared is None:
            raise InputError("shared_expert_gate needs a shared expert: give shared_expert_d_ff")
        if self.latent_from < 0 or (self.latent_from and (self.beside_mlp is not None or self.sigmoid_input
                                                          or self.n_zero)):
            raise InputError("the latent MoE (moe_latent_dim) is built with neither Gemma 4's experts beside the MLP, "
                             "router_sigmoid_input nor zero_experts (no model has them together)")
        self.routing.check(self.n_router, self.top_k)

    @property
    def d_model(self) -> int:
        """The block's width: what the router, the shared expert and the residual read."""
        return self.latent_from or self.expert.d_model

    @property
    def latent(self) -> int:
        """The routed experts' width when it is a latent one (step 7), else 0."""
        return self.expert.d_model if self.latent_from else 0

    @property
    def dispatch_width(self) -> int:
        """The width of each routed token as the experts receive it (and an all-to-all moves it): L or d."""
        return self.expert.d_model

    @property
    def n_router(self) -> int:
        """Experts the router scores: the real ones and the zero-computation ones (step 5)."""
        return self.n_expert + self.n_zero

    def capacity(self, tokens: int) -> Optional[int]:
        """Rows each expert's buffer holds for ``tokens`` tokens: ceil(c·k·tokens / E); None when dropless."""
        if self.capacity_factor is None:
            return None
        factor = Fraction(str(self.capacity_factor))  # 1.25 exactly, not its binary neighbour
        return math.ceil(factor * self.top_k * tokens / self.n_expert)

    def routed_rows(self, tokens: int) -> int:
        """Token rows the experts multiply in all: k per token, or E full buffers with a capacity."""
        capacity = self.capacity(tokens)
        return self.top_k * tokens if capacity is None else self.n_expert * capacity

    def weights(self) -> list[Weight]:
        d, E = self.d_model, self.n_expert
        out = [Weight("router_weight", (self.n_router, d), "ffn", "MoE router weight")]
        if self.router_bias:
            out.append(Weight("router_bias", (self.n_router,), "ffn", "MoE router bias"))
        out += [w.named("expert_ffn_") for w in self.expert.weights("expert FFN", E, self.top_k)]
        if self.latent:  # step 7: d -> L before the experts, L -> d after, once per token
            L, bias = self.latent, self.expert.bias
            out.append(Weight("latent_in_weight", (L, d), "ffn", "MoE latent in weight"))
            if bias:
                out.append(Weight("latent_in_bias", (L,), "ffn", "MoE latent in bias"))
            out.append(Weight("latent_out_weight", (d, L), "ffn", "MoE latent out weight"))
            if bias:
                out.append(Weight("latent_out_bias", (d,), "ffn", "MoE latent out bias"))
        if self.shared is not None:
            out += [w.named("shared_expert_ffn_") for w in self.shared.weights("shared expert FFN")]
            if self.shared_gate:
                out.append(Weight("shared_expert_gate_weight", (1, d), "ffn", "shared expert gate weight"))
        if self.beside_mlp is not None:  # step 5
            out += [Weight("router_scale", (d,), "ffn", "MoE router scale"),
                    Weight("per_expert_scale", (E,), "ffn", "MoE per-expert scale")]
            out += [w for name, label in BESIDE_NORMS for w in self.beside_mlp.weights(name, label)]
        return out

    def linears(self, tokens: int | None = None) -> list[Linear]:
        label = f"expert FFN (top-{self.top_k} of {self.n_expert})"
        if self.n_zero:
            label = f"expert FFN (top-{self.top_k} of {self.n_expert} + {self.n_zero} zero, all k real)"
        capacity = None if tokens is None else self.capacity(tokens)
        if capacity is not None:
            label += f", {capacity} rows each"
        out = [Linear("router", "ffn", "MoE router", self.d_model, self.n_router)]
        if self.latent:  # step 7: label the width, project in once per token
            label += f", latent {self.latent}"
            out.append(Linear("latent_in", "ffn", "MoE latent in", self.d_model, self.latent))
        out += [m.named("expert_ffn_") for m in self.expert.linears(label, "routed")]
        if self.latent:
            out.append(Linear("latent_out", "ffn", "MoE latent out", self.latent, self.d_model))
        if self.shared is not None:
            out += [m.named("shared_expert_ffn_") for m in self.shared.linears("shared expert FFN")]
            if self.shared_gate:
                out.append(Linear("shared_expert_gate", "ffn", "shared expert gate", self.d_model, 1))
        return out
