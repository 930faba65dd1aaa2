"""Analytic parameter counts of a ModelConfig: pure arithmetic, no torch.

Derivation for one decoder block (d = d_model, q = n_head * d_head, k = n_kv_head * d_head, f = d_ff):

1. attention Q, K, V projections: d*q + d*k + d*k weights, q + k + k biases (if attn_bias);
2. attention output projection: q*d weights, d bias;
3. FFN: up d*f and down f*d weights (plus a gate d*f when gated, SwiGLU/GeGLU), f (+f) + d biases;
4. two norms (before or after each sub-layer): d weights each, d biases each for LayerNorm with bias.

Outside the blocks: token embedding V*d; learned positions max_seq_len*d (sinusoidal, RoPE and ALiBi
have none); a final norm d (+d); the LM head V*d, counted once when tied to the token embedding.

With q = k = d, no biases and f = 4d this is the textbook 12*d^2 per layer (4d^2 attention + 8d^2 FFN);
the "seeds' approximation" is 12*L*d^2 + V*d (+ V*d for an untied head).

Other kinds (see tfcalc.config):

5. a mixture of experts replaces the FFN of step 3 by n_expert copies of it plus a router d*n_expert
   (no bias, as in Mixtral); a token runs n_expert_active of the copies, so its *active* parameters
   are the total less (n_expert - n_expert_active) FFNs per block;
6. an encoder block is a decoder block (the mask changes no parameter); a decoder block of an
   encoder-decoder adds cross-attention, steps 1-2 again with K and V read from the encoder output,
   and its own norm;
7. BERT adds token-type embeddings type_vocab_size*d, a norm after the embeddings, and a pooler d*d + d;
   BertModel (the published ~110M) has no LM head;
8. an encoder-decoder has an embedding (and a final norm, when pre-norm) per stack; the encoder's token
   embedding is the decoder's, and the LM head the decoder's token embedding, when tied (Vaswani et
   al. 2017, sec. 3.4, ties all three).

Layouts and extras of later models (tfcalc.config), each a tensor of the real module:

9. attention biases on Q, K and V only (Qwen2): q + 2k, and no O bias d;
10. Q/K norms (Qwen3): one norm d_head wide for Q and one for K per block, shared by the heads;
11. sandwich norms (Gemma 2): a second norm on each sub-layer's output, 2 more per block; a parallel
    block with one shared norm (Falcon-7B): 1 per block in place of 2;
12. T5's relative position bias: a (buckets × n_head) table per stack; OPT's learned positions have
    position_offset (2) more rows than max_seq_len;
13. a shared expert (Qwen2-MoE): one more FFN of width shared_expert_d_ff per block, always active,
    and its gate d (Linear(d, 1), no bias);
14. BERT's MLM head: a transform d·d + d with a norm, and a bias V on the vocabulary projection;
15. cross-attention in a decoder-only stack (GPT-2's add_cross_attention): steps 1-2 and a norm per
    block, as in an encoder-decoder's decoder.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tfcalc.architecture import Placed
from tfcalc.architecture.mixer import ATTENTION, role_of
from tfcalc.config import ModelConfig, replace

GROUPS = ("embeddings", "attention", "cross_attention", "ffn", "norms", "pooler", "lm_head")
STACKS = ("encoder", "decoder")  # the sections of an encoder-decoder; one-stack models leave stack ""


@dataclass(frozen=True)
class ParamEntry:
    """One kind of parameter tensor: its shape, and how many copies the model holds."""

    component: str  # stable key in the JSON breakdown
    group: str  # one of GROUPS
    label: str  # what a reader calls it
    shape: tuple[int, ...]
    copies: int = 1  # n_layer for per-block tensors (times experts for an expert's tensors)
    tied_to: str | None = None  # shares storage with that component: counted there, not here
    stack: str = ""  # one of STACKS in an encoder-decoder, "" otherwise
    experts: int = 1  # per block, this many copies are experts of a MoE FFN ...
    experts_active: int = 1  # ... of which each token runs this many
    # the reports' group (tfcalc.count.model.parts): a token mixer's declared role where it is not attention ("ssm"
    # for a Mamba2 layer's tensors, tfcalc.architecture.mixer.MixerRole); "": ``group``
    part: str = ""

    @property
    def per_copy(self) -> int:
        return math.prod(self.shape)

    @property
    def total(self) -> int:
        return 0 if self.tied_to else self.per_copy * self.copies

    @property
    def active_total(self) -> int:
        """Parameters one token's forward pass uses: only the experts it is routed to."""
        return self.total // self.experts * self.experts_active


# the convention for zero-computation experts (tfcalc.architecture.ffn, step 5), shared by params and flops
ZERO_EXPERTS = ("zero-computation experts: the router also scores {z} identity experts; a pick of one costs no "
                "weights and no matmul, and how many of the {k} picks land there is the learned router's choice. "
                "Active parameters and FLOPs count the upper bound, all {k} on real experts (LongCat-Flash, arXiv "
                "2509.01322, sec. 2.1: its mean is steered by a bias, not fixed by the config)")


def param_entries(cfg: ModelConfig) -> list[ParamEntry]:
    """Every parameter tensor of the model, in model order (encoder first): a fold over
    ``cfg.architecture.weights()`` (tfcalc.architecture), one entry per tensor kind.

    Component names are those of a decoder-only model for the stack that makes the output (the decoder,
    or an encoder-only model's one stack); an encoder-decoder's encoder has the same names prefixed
    ``encoder_``. Its token embedding is tied to the decoder's unless tie_encoder_embedding is false.
    """
    return [_entry(p) for p in cfg.architecture.weights()]


def _entry(p: Placed) -> ParamEntry:
    w = p.weight
    experts = w.copies if w.experts_active else 1
    return ParamEntry(w.name, w.role, w.label, w.shape, p.layers * w.copies, w.tied_to, p.stack, experts,
                      w.experts_active or 1, w.part or "")


def breakdown(cfg: ModelConfig) -> dict[str, int]:
    """{component: parameters}, in model order; sums to total(cfg). A tied tensor shows 0."""
    out: dict[str, int] = {}
    for e in param_entries(cfg):  # a name held in two shapes (layers that differ) sums
        out[e.component] = out.get(e.component, 0) + e.total
    return out


def group_totals(cfg: ModelConfig, counts: dict[str, int]) -> dict[str, int]:
    """Sum a breakdown of cfg's model (analytic or measured) into GROUPS; unknown keys go to 'other'."""
    return _sum_by(cfg, counts, "group", GROUPS)


def stack_totals(cfg: ModelConfig, counts: dict[str, int]) -> dict[str, int]:
    """{encoder: n, decoder: n} for an encoder-decoder (the LM head counts with the decoder); {} otherwise."""
    return _sum_by(cfg, counts, "stack", STACKS) if cfg.architecture.kind == "encoder-decoder" else {}


def _sum_by(cfg: ModelConfig, counts: dict[str, int], attribute: str, keys: tuple[str, ...]) -> dict[str, int]:
    key_of = {e.component: getattr(e, attribute) for e in param_entries(cfg)}
    out = dict.fromkeys(keys, 0)
    for component, n in counts.items():
        key = key_of.get(component, "other")
        out[key] = out.get(key, 0) + n
    return out


def active_params(cfg: ModelConfig, counts: dict[str, int]) -> int:
    """Parameters one token uses, from a breakdown of cfg's model: all but the experts it is not routed
    to (router, attention, embeddings, norms and head included). Equals the total for a dense model."""
    entries = {e.component: e for e in param_entries(cfg)}
    return sum(n // entries[c].experts * entries[c].experts_active if c in entries else n for c, n in counts.items())


def total(cfg: ModelConfig) -> int:
    return sum(e.total for e in param_entries(cfg))


def active_total(cfg: ModelConfig) -> int:
    return sum(e.active_total for e in param_entries(cfg))


def _vocab_matrices(cfg: ModelConfig) -> int:
    """How many V x d matrices the model holds: the token embedding, an untied LM head, an untied
    encoder embedding."""
    arch = cfg.architecture  # read off the description: the head's tie, the encoder table's share
    untied_head = arch.head.lm_head and not arch.head.tied
    untied_encoder = arch.kind == "encoder-decoder" and arch.stacks[0].embeddings.shared_with is None
    return 1 + untied_head + untied_encoder


def seeds_approximation(cfg: ModelConfig) -> int:
    """12*L*d^2 + V*d, plus V*d more when the LM head is not tied (Kaplan et al. 2020, sec. 2.1).

    Extended the same way to the other kinds: a MoE block is (4 + 8*E)*d^2 (E experts of 8*d^2), a
    decoder block with cross-attention 4*d^2 more; one V*d per token embedding or LM head held."""
    arch = cfg.architecture
    d2 = arch.d_model**2
    # folded over the layers (tfcalc.architecture): a mixed model's dense layers count one FFN
    blocks = sum(n * (4 * d2 + 8 * d2 * (b.ffn.n_expert if b.is_moe else 1) + (4 * d2 if b.cross_attention else 0))
                 for s in arch.stacks for b, n in s.kinds())
    return blocks + _vocab_matrices(cfg) * arch.vocab_size * arch.d_model


def seeds_formula(cfg: ModelConfig) -> str:
    arch = cfg.architecture
    moe = arch.has_moe
    coef = "(4 + 8·E)" if moe else "12"
    if arch.kind == "encoder-decoder":
        cross = "(8 + 8·E)" if moe else "16"
        blocks = f"{coef}·L_enc·d² + {cross}·L_dec·d²"
    elif any(b.cross_attention is not None for _, b, _ in arch.kinds()):
        blocks = f"{'(8 + 8·E)' if moe else '16'}·L·d²"
    else:
        blocks = f"{coef}·L·d²"
    n = _vocab_matrices(cfg)
    return f"{blocks} + {'' if n == 1 else f'{n}·'}V·d"


_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def nominal_value(nominal: str | None) -> float | None:
    """'175B' -> 1.75e11; None (or something unreadable) -> None."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMBT])\s*", nominal or "", re.IGNORECASE)
    return float(m.group(1)) * _SUFFIX[m.group(2).upper()] if m else None


@dataclass(frozen=True)
class WidthNote:
    """The attention width differs from d_model: the count as given, and the two readings that agree."""

    q_dim: int
    d_model: int
    total_as_given: int
    total_attention_d_model_wide: int  # d_head taken as d_model / n_head (possibly fractional)
    total_d_model_as_width: int  # d_model taken as n_head * d_head
    nominal: float | None

    def text(self, n_head: int, d_head: int) -> str:
        def rel(n: int) -> str:
            return f" ({(n - self.nominal) / self.nominal:+.1%} vs the named size)" if self.nominal else ""

        return (
            f"attention width n_head·d_head = {n_head}·{d_head} = {self.q_dim} differs from d_model = "
            f"{self.d_model}. As given: {self.total_as_given:,} params{rel(self.total_as_given)}; "
            f"with attention {self.d_model} wide (d_head {self.d_model / n_head:.4g}): "
            f"{self.total_attention_d_model_wide:,}{rel(self.total_attention_d_model_wide)}; "
            f"with d_model = {self.q_dim}: {self.total_d_model_as_width:,}{rel(self.total_d_model_as_width)}."
        )


def width_note(cfg: ModelConfig) -> WidthNote | None:
    """When n_head*d_head != d_model (GPT-3 XL and 13B as printed in Brown et al. 2020, Table 2.1),
    what the count would be under either reading that makes the table consistent. Front-end reads, on
    purpose: the note is about the flat fields as a YAML (or the paper's table) gives them, and re-reads
    them two other ways (each count itself still a fold over the description, ``total``)."""
    if cfg.q_dim == cfg.d_model or cfg.kv_lora_rank is not None:  # latent attention: wide heads by design
        return None
    if any(getattr(b.mixer, "reads_embeddings", False) for _, b, _ in cfg.architecture.kinds()):
        return None  # Zamba2's shared attention reads [h | embeddings]: 2·d_model wide by design
    as_given = total(cfg)

    # the attention modules, counted off the description: a hybrid's other mixers (Mamba2, DeltaNet) have no
    # n_head·d_head width to re-read, and its FFN-alone layers no mixer at all
    kinds = cfg.architecture.kinds()
    modules = sum(n for _, b, n in kinds if role_of(b.mixer) == ATTENTION and b.mixer.weights()) + sum(
        n for _, b, n in kinds if b.cross_attention is not None)

    def attention_params(q: float, k: float) -> float:
        d = cfg.d_model
        return modules * (2 * d * q + 2 * d * k + (q + 2 * k if cfg.attn_bias else 0) + (d if cfg.o_bias else 0))

    ratio = cfg.kv_heads / cfg.n_head
    d_model_wide = as_given - attention_params(cfg.q_dim, cfg.kv_dim) + attention_params(
        cfg.d_model, cfg.d_model * ratio
    )
    return WidthNote(
        q_dim=cfg.q_dim,
        d_model=cfg.d_model,
        total_as_given=as_given,
        total_attention_d_model_wide=round(d_model_wide),
        total_d_model_as_width=total(replace(cfg, d_model=cfg.q_dim)),
        nominal=nominal_value(cfg.nominal_params),
    )
