"""Multi-head latent attention (MLA: DeepSeek-V2, Liu et al. 2024, arXiv 2405.04434, sec. 2.1; DeepSeek-V3,
arXiv 2412.19437, sec. 2.1.1), the attention of DeepSeek-V2/V3/R1 and Kimi K2, as a component beside
``Attention`` answering the same token-mixer protocol (tfcalc.architecture.mixer: ``weights``, ``linears``,
``mixing``, ``state``, ``tp_widths``, ``capabilities``) that every fold calls.

H heads; each query and key head is h_n + h_r wide (qk_nope_head_dim no-position channels and
qk_rope_head_dim rotary channels), each value head h_v (v_head_dim); c_kv = kv_lora_rank, c_q = q_lora_rank.

1. queries: with c_q, Q = W_qb · norm(W_qa · x) (d -> c_q -> H·(h_n + h_r)); without (DeepSeek-V2-Lite),
   Q = W_q · x;
2. keys and values: W_kva · x (d -> c_kv + h_r) is split into the latent c (c_kv, then normed) and one
   rotary key k_r (h_r) shared by all heads; W_kvb · c (c_kv -> H·(h_n + h_v)) gives each head's no-position
   key and its value; a head's key is [k_n | k_r];
3. scores over H heads of h_n + h_r channels, attention·V of h_v; O projection H·h_v -> d;
4. the cache: what transformers 5 (modeling_deepseek_v3.py: "Cache read / write is performed while latent
   KV is still compressed") and MLA-aware servers (vLLM's and SGLang's MLA backends; the paper, sec. 2.1.2,
   Table 1: (d_c + d_h^R)·l elements per token) keep: c and k_r, c_kv + h_r values per token and layer.
   ``expanded_kv_elements`` names beside it what a cache of plain K and V heads would hold: H·(h_n + h_r)
   + H·h_v.

FLOPs: matmul by matmul as the module tfcalc builds runs them (tfcalc.model.latent), in the form that runs:
5. a forward pass (prefill, training, a verify step) in the *naive* form, what transformers runs
   (``linears``, ``score_dims``): W_kvb expands the latents of all the positions attended to (rows "keys":
   the sequence), then full-width heads attend: 2·H·(h_n + h_r) per (query, key) pair for Q·Kᵀ, 2·H·h_v
   for attention·V;
6. a decode step (one query per sequence against the cache) in the *absorbed* form (the paper, sec. 2.1.2;
   vLLM's and SGLang's MLA decode; tfcalc.model.latent_absorbed), ``decode_linears``, ``decode_score_dims``:
   W_UK (W_kvb's key rows) folds into the query and W_UV (its value rows) into the output, and the heads
   attend multi-query over the cached [c | k_r]. Per token and layer 2·H·h_n·c_kv (queries into the latent
   space, H matmuls (1, h_n) @ (h_n, c_kv)) and 2·H·c_kv·h_v (outputs out of it, H matmuls (1, c_kv) @
   (c_kv, h_v)); per key 2·H·(c_kv + h_r) for Q·Kᵀ and 2·H·c_kv for attention·V; no expansion over the
   context. The naive step would instead spend 2·S·c_kv·H·(h_n + h_v) on W_kvb over its S keys and
   2·H·S·(h_n + h_r + h_v) on the scores. W_kvb is still read once per step (its weights, split between the
   two absorbed matmuls by rows). DeepSeek-V3 (H = 128, h_n = h_v = 128, h_r = 64, c_kv = 512), per token and
   layer beside the Q, KV-compression and O projections: absorbed 2·2·128·128·512 = 33,554,432 plus
   2·128·(576 + 512) = 278,528 per key; naive 2·512·128·256 + 2·128·(192 + 128) = 33,636,352 per key.

A head gate (``head_gate``; Ling 3's MLA, transformers' modeling_bailing_hybrid.py BailingHybridAttention): each
head's output times sigmoid(W_g · x), W_g d -> H (no bias), before O: 2·d·H FLOPs a token (``linears``' g), H
sigmoids and H·h_v products (``elementwise``); the naive and the absorbed forms alike.

LongCat-Flash's scaled latents (``lora_scale``; modeling_longcat_flash.py, LongcatFlashMLA): the query (all
H·(h_n + h_r) channels) times sqrt(d / c_q) and the normed KV latent times sqrt(d / c_kv) before it is cached and
expanded; two elementwise products, no matmul, no tensor.

YaRN (Peng et al. 2023, arXiv 2309.00071): the rotary frequencies are interpolated (``Yarn``) and the
softmax scale is (h_n + h_r)^-1/2 · mscale², mscale = 0.1·mscale_all_dim·ln(factor) + 1
(modeling_deepseek_v3.py, yarn_get_mscale). Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from tfcalc.architecture import latent_eager, saved
from tfcalc.architecture.attention import causal_pairs, score_mixing
from tfcalc.architecture.mixer import ATTENTION, Capabilities, EagerOp, Elementwise, Mixing, StateTensor
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.rope import Yarn
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError


@dataclass(frozen=True)
class LatentAttention:
    d_model: int
    n_head: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: Optional[int] = None  # None: a plain Q projection (DeepSeek-V2-Lite)
    norm: Optional[Norm] = None  # the kind of the norms on the compressed Q and KV (RMSNorm in DeepSeek)
    bias: bool = False  # attention_bias: biases on W_qa, W_kva and W_o (modeling_deepseek_v3.py)
    rope_theta: Optional[float] = 10000.0
    yarn: Optional[Yarn] = None
    interleave: bool = True  # rotary pairs (2i, 2i+1), as DeepSeek lays them out; false: rotate-half
    causal: bool = True
    head_gate: bool = False  # each head's output times sigmoid(W_g·x), W_g d -> H (module docstring)
    kind: Literal["self"] = "self"
    lora_scale: bool = False  # LongCat-Flash's sqrt(d / c) on the query and the latent (module docstring)
    # what a fold of ``Attention`` may read and a latent attention does not have
    window: None = None
    chunk: None = None
    qk_norm_whole: bool = False
    qk_norm_after_rope: bool = False
    temperature: None = None
    qk_norm: None = None
    softcap: None = None
    sinks: bool = False

    def __post_init__(self) -> None:
        for name in ("d_model", "n_head", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim"):
            if getattr(self, name) < 1:
                raise InputError(f"latent attention {name} must be positive; got {getattr(self, name)}")
        if self.qk_nope_head_dim < 0 or (self.q_lora_rank is not None and self.q_lora_rank < 1):
            raise InputError("latent attention: qk_nope_head_dim must be 0 or more and q_lora_rank positive")
        if self.qk_rope_head_dim % 2:
            raise InputError(f"rope rotates pairs of channels: qk_rope_head_dim ({self.qk_rope_head_dim}) must be even")
        if self.lora_scale and self.q_lora_rank is None:
            raise InputError("latent attention's lora_scale scales the compressed query: give q_lora_rank")
        if self.kv_lora_rank > self.d_model or (self.q_lora_rank or 0) > self.d_model:
            raise InputError(f"kv_lora_rank ({self.kv_lora_rank}) and q_lora_rank ({self.q_lora_rank}) compress the "
                             f"hidden state: each must be at most d_model ({self.d_model})")

    # --- the widths an ``Attention`` fold reads ---
    @property
    def head_dim(self) -> int:
        """Channels of each query and key head: h_n + h_r."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim

    @property
    def n_kv_head(self) -> int:
        """Expanded key/value heads: one per query head (num_key_value_heads = num_attention_heads)."""
        return self.n_head

    @property
    def rope_dim(self) -> int:
        return self.qk_rope_head_dim

    @property
    def q_width(self) -> int:
        return self.n_head * self.head_dim

    @property
    def qkv_bias(self) -> bool:
        """No bias on the per-head Q, K, V (W_qb, W_kvb); the compressions' biases are W_qa's and W_kva's."""
        return False

    @property
    def o_bias(self) -> bool:
        return self.bias

    @property
    def k_width(self) -> int:
        """The expanded keys' width, H·(h_n + h_r) (what a fold of ``Attention`` reads as K's)."""
        return self.n_head * self.head_dim

    @property
    def v_width(self) -> int:
        return self.n_head * self.v_head_dim

    @property
    def out_width(self) -> int:
        return self.n_head * self.v_head_dim

    @property
    def scale(self) -> float:
        """The softmax scale: (h_n + h_r)^-1/2, times YaRN's mscale² (see the module docstring)."""
        return self.head_dim ** -0.5 * (self.yarn.softmax_factor if self.yarn else 1.0)

    @property
    def latent_scales(self) -> Optional[tuple[float, float]]:
        """(query's, latent's) factors of ``lora_scale``: sqrt(d / c_q), sqrt(d / c_kv); None without it."""
        if not self.lora_scale:
            return None
        return (self.d_model / self.q_lora_rank) ** 0.5, (self.d_model / self.kv_lora_rank) ** 0.5

    def latent_norm(self, width: int) -> Norm:
        base = self.norm or Norm("rmsnorm", width, False, 1e-6)
        return Norm(base.kind, width, base.bias, 1e-6)  # DeepseekV3RMSNorm(rank): its default eps

    def weights(self) -> list[Weight]:
        """Model order (modeling_deepseek_v3.py, DeepseekV3Attention.__init__): W_q, or W_qa, its norm and
        W_qb; W_kva, its norm, W_kvb; W_o. The compressions stay whole under TP, the per-head ones split."""
        d, role, out = self.d_model, "attention", []
        if self.q_lora_rank is None:
            out.append(Weight("q_weight", (self.q_width, d), role, "attention Q weight", "rows"))
        else:
            c = self.q_lora_rank
            out.append(Weight("q_a_weight", (c, d), role, "attention Q compression weight"))
            out += [Weight("q_a_bias", (c,), role, "attention Q compression bias")] if self.bias else []
            out += self.latent_norm(c).weights("q_a_norm", "attention Q latent norm")
            out.append(Weight("q_b_weight", (self.q_width, c), role, "attention Q expansion weight", "rows"))
        c, r = self.kv_lora_rank, self.qk_rope_head_dim
        out.append(Weight("kv_a_weight", (c + r, d), role, "attention KV compression weight"))
        out += [Weight("kv_a_bias", (c + r,), role, "attention KV compression bias")] if self.bias else []
        out += self.latent_norm(c).weights("kv_a_norm", "attention KV latent norm")
        width = self.n_head * (self.qk_nope_head_dim + self.v_head_dim)
        out.append(Weight("kv_b_weight", (width, c), role, "attention KV expansion weight", "rows"))
        if self.head_gate:
            out.append(Weight("g_proj_weight", (self.n_head, d), role, "attention head gate weight", "rows"))
        out.append(Weight("o_weight", (d, self.out_width), role, "attention O weight", "cols"))
        return out + ([Weight("o_bias", (d,), role, "attention O bias")] if self.bias else [])

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        """Steps 1-3: W_kvb runs over the positions attended to (rows "keys"), the others over the tokens; a
        decode step (``step``) in the absorbed form (step 6, ``decode_linears``)."""
        if step:
            return self.decode_linears()
        role, d = "attention_proj", self.d_model
        if self.q_lora_rank is None:
            out = [Linear("q", role, "Q projection", d, self.q_width)]
        else:
            out = [Linear("q_a", role, "Q compression", d, self.q_lora_rank),
                   Linear("q_b", role, "Q expansion", self.q_lora_rank, self.q_width)]
        c = self.kv_lora_rank
        out += [Linear("kv_a", role, "KV compression", d, c + self.qk_rope_head_dim),
                Linear("kv_b", role, "KV expansion (every position attended to)", c,
                       self.n_head * (self.qk_nope_head_dim + self.v_head_dim), "keys")]
        out += [Linear("g", role, "head gate", d, self.n_head)] if self.head_gate else []
        return out + [Linear("o", role, "O projection", self.out_width, d)]

    def score_dims(self) -> tuple[int, int, int]:
        """(query heads, Q·K channels h_n + h_r, V channels h_v) of step 3."""
        return self.n_head, self.head_dim, self.v_head_dim

    def decode_linears(self) -> list[Linear]:
        """A decode step's matmuls in the absorbed form (step 6): W_kvb over no key, W_UK and W_UV once per
        head over the step's tokens."""
        c, role, H = self.kv_lora_rank, "attention_proj", self.n_head
        out = [m for m in self.linears(step=False) if m.name not in ("kv_b", "o")]
        return out + [Linear("uk", role, "Q into the latent (W_UK absorbed)", self.qk_nope_head_dim, c, count=H),
                      Linear("uv", role, "out of the latent (W_UV absorbed)", c, self.v_head_dim, count=H),
                      Linear("o", role, "O projection", self.out_width, self.d_model)]

    def decode_score_dims(self) -> tuple[int, int, int]:
        """(query heads, Q·K channels c_kv + h_r, V channels c_kv) of a decode step's multi-query attention over
        the latents (step 6)."""
        return self.n_head, self.kv_lora_rank + self.qk_rope_head_dim, self.kv_lora_rank

    def kv_elements(self) -> int:
        """Elements cached per layer and position: the latent and the rotary key (step 4)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def expanded_kv_elements(self) -> int:
        """What plain K and V heads would cache per layer and position: H·(h_n + h_r) + H·h_v."""
        return self.n_head * (self.head_dim + self.v_head_dim)

    def kv_positions(self, context: int, spare: int = 0) -> int:
        return context  # no window: every position kept, no ring to spare slots for

    # --- the token-mixer protocol (tfcalc.architecture.mixer) ---
    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """Step 3 for one sequence over the expanded heads (the naive form, see the module docstring); a decode
        step (``step``) in the absorbed form, multi-query over the latents (step 6, ``decode_score_dims``). Q·Kᵀ
        reads the cached latent and rotary key (c_kv + h_r per key) once; attention·V reads the latent again in
        the same fused kernel (absorbed), or the values W_kvb expands from it (naive): no state of its own."""
        pairs = causal_pairs(queries, keys) if self.causal else queries * keys
        heads, h, hv = self.decode_score_dims() if step else self.score_dims()
        return score_mixing(heads, h, hv, queries, keys, pairs, self.kv_elements(), 0)

    def elementwise(self, queries: int, keys: int, step: bool = False) -> list[Elementwise]:
        """One sequence's non-matmul work as the count prices it: the softmax of the full square over the H
        heads, RoPE on the rotary channels of Q's and K's H heads each, W_o's bias add. A decode step
        (``step``): the absorbed step's own work (``step_elementwise``)."""
        if step:
            return self.step_elementwise(queries, keys)
        out = [Elementwise("softmax", "softmax (full square)", self.n_head * queries * keys)]
        if self.rope_theta is not None:
            out.append(Elementwise("rope", "RoPE on Q and K", queries * 2 * self.n_head * self.qk_rope_head_dim))
        out += self._scale_elementwise(queries)
        return out + self._gate_work(queries) + (
            [Elementwise("bias", "bias adds", queries * self.d_model)] if self.bias else [])

    def _gate_work(self, queries: int) -> list[Elementwise]:
        """The head gate's sigmoid (3 FLOPs: exp, add, divide) over H and its product over H·h_v (1)."""
        if not self.head_gate:
            return []
        return [Elementwise("output_gate", "head gate sigmoid", queries * self.n_head, per_element=3),
                Elementwise("output_gate", "head gate product", queries * self.out_width, per_element=1)]

    def _scale_elementwise(self, queries: int) -> list[Elementwise]:
        """``lora_scale``'s two products (module docstring): the query's H·(h_n + h_r) and the latent's c_kv, one
        FLOP an element."""
        if not self.lora_scale:
            return []
        return [Elementwise("scale", "query and latent scaled (LongCat)", queries * (self.q_width + self.kv_lora_rank),
                            per_element=1)]

    def kernel(self, explicit_mask: bool) -> str:
        """SDPA's fused CPU kernel takes one head width: V's h_v beside h_n + h_r runs the math kernel."""
        return "math" if explicit_mask or self.v_head_dim != self.head_dim else "flash"

    def mask_span(self, length: int) -> tuple[Optional[int], Optional[int]]:
        return None, None  # every causal key: no window, no chunk

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool,
              sources: Optional[int] = None) -> dict[str, int]:
        """tfcalc.count.model.activation_terms, step 11 (tfcalc.architecture.saved), and 9's scores dropout."""
        out = saved.latent_saved(self, batch, seq, e, kernel)
        if self.head_gate:  # the product keeps the attention's output and the gate (the sigmoid's output) apart
            out["attn_output"] += e * (self.out_width + self.n_head)
        out["scores_dropout"] = (1 + e) * self.n_head * seq if dropout and kernel == "math" else 0
        return out

    def working_set(self, kernel: str, length: int, sources: Optional[int] = None) -> int:
        """As an attention of the expanded heads' widths (tfcalc.count.model.memory.forward_working_set)."""
        return saved.working_set(self, kernel, length)

    def step_elementwise(self, queries: int, keys: int) -> list[Elementwise]:
        """The absorbed decode step's non-matmul work (tfcalc.model.latent, tfcalc.model.latent_absorbed), op by
        op as it runs (tests/model/test_latent_step_traffic.py records it): the softmax of H rows over the keys
        (the attention kernel's); the norms of the KV latent (c) and of Q's compression (c_q); RoPE on the H
        query heads' h_r channels and on the ONE shared rotary key's (the naive count's 2·H·h_r rotates K per
        head, which the module never does), each de-interleaved first (a copy of its channels); the new row
        [c | k_r] joined and scattered into the state (c + h_r, twice); the queries [q̃ | q_r] joined,
        H·(c + h_r); W_o's bias add. Copies are "copy" work at 0 FLOPs: their traffic and kernels count. Left
        out: the output heads' copy for W_o, H·h_v, which only a step of B·T > 1 rows makes (at one row it
        is a view; this count is per sequence, blind to the batch; ``step_eager_ops`` has it)."""
        H, hr, c = self.n_head, self.qk_rope_head_dim, self.kv_lora_rank
        out = [Elementwise("softmax", "softmax (multi-query over the latents)", H * queries * keys),
               Elementwise("qk_norm", "KV latent norm", queries * c, self.latent_norm(c))]
        if self.q_lora_rank is not None:
            out.append(Elementwise("qk_norm", "Q latent norm", queries * self.q_lora_rank,
                                   self.latent_norm(self.q_lora_rank)))
        if self.rope_theta is not None:
            if self.interleave:
                out += [Elementwise("copy", "de-interleave Q's rotary channels", queries * H * hr, per_element=0),
                        Elementwise("copy", "de-interleave K's rotary channels", queries * hr, per_element=0)]
            out.append(Elementwise("rope", "RoPE on Q's heads and the shared K", queries * (H + 1) * hr))
        out += self._scale_elementwise(queries)
        out += [Elementwise("copy", "new state row [c | k_r] joined", queries * (c + hr), per_element=0),
                Elementwise("copy", "state row written (scatter)", queries * (c + hr), per_element=0),
                Elementwise("copy", "queries [q̃ | q_r] joined", queries * H * (c + hr), per_element=0)]
        bias = [Elementwise("bias", "bias adds", queries * self.d_model)] if self.bias else []
        return out + self._gate_work(queries) + bias

    def eager_ops(self, tokens: int, step: bool = False) -> list[EagerOp]:
        """The eager work of a training step, or with ``step`` of one absorbed decode step over ``tokens`` = B·T
        query rows (tfcalc.architecture.latent_eager): a step has no backward, so only the forward figures
        tfcalc.count.perf.eager prices from them apply."""
        return latent_eager.step_ops(self, tokens) if step else latent_eager.train_ops(self, tokens)

    def step_eager_ops(self, tokens: int) -> list[EagerOp]:
        return latent_eager.step_ops(self, tokens)

    def train_eager_ops(self, tokens: int) -> list[EagerOp]:
        return latent_eager.train_ops(self, tokens)

    def state(self) -> list[StateTensor]:
        """Step 4: the latent c (c_kv) and the rotary key k_r (h_r) of every position, in the cache dtype."""
        return [StateTensor("latent", self.kv_lora_rank, shape=(1, self.kv_lora_rank)),
                StateTensor("k_rope", self.qk_rope_head_dim, shape=(1, self.qk_rope_head_dim))]

    def expanded_state(self) -> list[StateTensor]:
        """The K and V heads a cache without MLA support keeps: H·(h_n + h_r) and H·h_v per position."""
        return [StateTensor("k", self.k_width, shape=(self.n_head, self.head_dim)),
                StateTensor("v", self.v_width, shape=(self.n_head, self.v_head_dim))]

    def tp_widths(self) -> list[tuple[str, int]]:
        """The per-head tensors split by heads (W_qb, W_kvb, W_o); the compressions stay whole."""
        return [("n_head", self.n_head), ("n_kv_head", self.n_kv_head)]

    def tp_state_heads(self) -> Optional[int]:
        """None: the latent cache is one per token, shared by the heads, kept whole on every rank."""
        return None

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(op_recompute="latent attention", decode_form="absorbed")

    role = ATTENTION  # attention over a latent cache: attention's parts (tfcalc.architecture.mixer, 10.)
    module = "tfcalc.model.latent:LatentAttention"  # the torch module that runs it (tfcalc.model.mixers)

    def state_tensors(self) -> tuple[tuple[str, int, int], ...]:
        """(name, heads, width) of each tensor ``state`` describes, one head each: what
        tfcalc.model.attention_state allocates (one description for the count and the runtime)."""
        return tuple((t.name, *t.shape) for t in self.state())
