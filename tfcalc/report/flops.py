"""The report of `tfcalc flops`: forward FLOPs by matmul (full square and causal), training, decode, the
standard formulas, the crossover where attention overtakes the FFN, and the FlopCounterMode measurement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from tfcalc.count.model import flops as count, parts
from tfcalc.count.model.params import ZERO_EXPERTS, width_note
from tfcalc.report.display import Displayed
from tfcalc.report.model_ref import ModelRef, WorkloadFields
from tfcalc.workload import Workload

if TYPE_CHECKING:
    from tfcalc.measure.flops import MeasuredFlops

# 'attention' in every share tfcalc prints: self-attention projections and scores, and cross-attention's.
ATTENTION_GROUPS = ("attention_proj", "attention_scores") + count.CROSS_GROUPS


def attention_share(totals: dict[str, int]) -> float:
    """The attention share of forward FLOPs: ATTENTION_GROUPS over the whole forward pass (of a breakdown by the
    reports' groups, tfcalc.count.model.parts: attention alone, a Mamba2 layer's FLOPs under its own role)."""
    return sum(totals[g] for g in ATTENTION_GROUPS) / sum(totals.values())


def reached_at(t: int | None) -> str:
    """A crossover length, or 'never' (a sliding window, or a mixer's fixed state, keeps them linear in T)."""
    return "never" if t is None else f"at T = {t:,}"


_at = reached_at


def crossover_json(crossover: count.Crossover) -> dict[str, int | None]:
    return {"scores_vs_ffn": crossover.scores_vs_ffn, "attention_vs_ffn": crossover.attention_vs_ffn}


@dataclass(frozen=True, repr=False)
class FlopsReport(WorkloadFields, Displayed):
    model: ModelRef
    workload: Workload  # resolved: seq and src_seq set
    recompute: bool
    breakdown: count.FlopBreakdown
    measured: Optional["MeasuredFlops"]  # None when not measured

    def headline(self) -> str:
        from tfcalc import units

        return f"{self.model.label}, B = {self.batch}, T = {self.seq:,}: {units.flop(self.forward)} forward"

    @property
    def forward(self) -> int:
        return self.breakdown.forward

    @property
    def forward_causal(self) -> int:
        return self.breakdown.forward_causal

    @property
    def training(self) -> int:
        return count.training_flops(self.cfg, self.workload, self.recompute)

    @property
    def training_exact(self) -> tuple[int, int]:
        """3 × forward, full square and causal: what the standard formulas are compared with."""
        return count.TRAINING_MULTIPLIER * self.forward, count.TRAINING_MULTIPLIER * self.forward_causal

    @property
    def training_multiplier(self) -> int:
        return count.RECOMPUTE_MULTIPLIER if self.recompute else count.TRAINING_MULTIPLIER

    @property
    def attention_share(self) -> float:
        """Attention's share alone (a Mamba2 layer's FLOPs are the SSM's, ``mixer_share``); the JSON key
        attention_share keeps the whole token-mixer sub-layer's, as it always had."""
        return attention_share(self.parts)

    @property
    def parts(self) -> dict[str, int]:
        """{group: FLOPs}, each token mixer's under the role it declares (tfcalc.count.model.parts): what the
        reports show; ``breakdown.totals()`` for a model of attention alone."""
        return parts.flop_totals(self.breakdown)

    @property
    def mixer_share(self) -> float:
        """Every token mixer's share of forward FLOPs, attention's (cross-attention's too) and the other roles'."""
        other = sum(self.parts[p] for r in parts.roles(self.cfg) for p in (r.proj, r.mixing))
        return self.attention_share + other / self.forward

    def mismatches(self) -> list[str]:
        """The groups (and 'other', FLOPs no group explains) where measured and analytic differ."""
        if self.measured is None:
            return []
        analytic = dict(self.breakdown.totals(), other=0)
        return [g for g, n in self.measured.groups.items() if analytic.get(g, 0) != n]

    @property
    def agrees(self) -> Optional[bool]:
        """Measured == analytic, in total and group by group (None when not measured)."""
        if self.measured is None:
            return None
        return self.measured.total == self.forward and not self.mismatches()

    @property
    def crossover(self) -> count.Crossover:
        return count.crossover_seq(self.cfg)

    @property
    def crossover_causal(self) -> count.Crossover:
        return count.crossover_seq(self.cfg, causal=True)

    @property
    def formulas(self) -> list[count.FormulaEstimate]:
        return count.standard_formulas(self.cfg, self.batch, self.seq)

    @property
    def decode(self) -> Optional[int]:
        """One decode step at context T; None for an encoder, which generates nothing."""
        if self.cfg.arch == "encoder":
            return None
        return count.decode_flops(self.cfg, self.workload)

    @property
    def decode_naive(self) -> Optional[int]:
        """The decode step with latent attention in the naive form (every cached latent expanded through W_kvb,
        as transformers runs it); the same as ``decode`` for every other model."""
        if not self.absorbed or self.decode is None:
            return self.decode
        return sum(e.causal_total for e in count.matmul_entries(self.cfg, self.batch, 1, self.seq, encoder=False))

    @property
    def absorbed(self) -> bool:
        """Whether a decoder layer's mixer decodes in the absorbed form (latent attention; asked of the mixers'
        declared capabilities, Architecture.decode_forms, not of a flat field)."""
        return "absorbed" in self.cfg.architecture.decode_forms()

    @property
    def beyond_context(self) -> Optional[str]:
        cfg = self.cfg
        if self.seq <= cfg.max_seq_len:
            return None
        return (f"{cfg.name}: --seq {self.seq:,} exceeds the context of {cfg.max_seq_len:,} tokens; counted anyway, "
                "as if the model had that many positions")

    @property
    def notes(self) -> list[str]:
        cfg, out = self.cfg, [self.beyond_context] if self.beyond_context else []
        if width_note(cfg):
            out.append(f"attention width n_head·d_head = {cfg.q_dim} differs from d_model = {cfg.d_model} "
                       "(as printed in the source): the attention FLOPs are counted as given")
        moe = cfg.architecture.moe()  # the mixture of experts' component (every MoE layer's alike)
        if moe is not None:
            out.append(
                f"mixture of experts: only the top-{moe.top_k} of {moe.n_expert} experts run for each token, "
                f"so the FFN counts {moe.top_k} experts' matmuls per token (and the router), not "
                f"{moe.n_expert}; the experts a token skips do no work for it")
            if moe.n_zero:
                out.append(ZERO_EXPERTS.format(z=moe.n_zero, k=moe.top_k))
            capacity = moe.capacity(self.batch * self.seq)
            if capacity is not None:
                out.append(
                    f"expert capacity factor {moe.capacity_factor}: each expert runs a buffer of {capacity:,} "
                    f"rows per layer (ceil(c·k·B·T/E), Fedus et al. 2022), {moe.n_expert * capacity:,} rows in all "
                    f"against {moe.top_k * self.batch * self.seq:,} token-expert pairs: padding costs "
                    "FLOPs when c > 1, and tokens past an expert's buffer are dropped (the residual carries them)")
        if self.absorbed and self.decode is not None:
            out.append("latent attention (DeepSeek's MLA): the forward pass counted in the naive form transformers "
                       "runs (W_kvb expands every key's latent); a decode step in the absorbed form tfcalc's module "
                       "and MLA servers run (DeepSeek-V2 sec. 2.1.2: W_UK folded into the query, W_UV into the "
                       "output, multi-query scores over the cached latents), "
                       f"{self.decode:,} FLOPs against {self.decode_naive:,} naive")
        if cfg.index_topk is not None:
            out.append(f"sparse attention (DeepSeek's DSA, the top {cfg.index_topk:,} keys per query): the full-square "
                       "line is what transformers' torch path runs and FlopCounterMode counts (the lightning indexer "
                       "over every key, the main attention dense under the top-k mask); the causal line counts the "
                       "indexer over its causal pairs and the main attention over min(top-k, t + 1) keys for the "
                       "query at t, what a sparse kernel computes; a decode step attends to the gathered top-k keys")
        if cfg.arch == "encoder":
            out.append("encoder: attention is bidirectional, so no score is masked and the causal count equals the "
                       "full one; an encoder generates nothing, so there is no decode step")
        if cfg.arch == "encoder-decoder":
            out.append(
                f"encoder-decoder: the encoder runs over S = {self.src_seq:,} source tokens, the decoder over "
                f"T = {self.seq:,} target tokens, and cross-attention scores T × S; per-token figures divide by "
                "the B·T target tokens")
        if cfg.arch != "decoder":
            out.append("the standard training formulas (--training) are written for decoder-only models; they are "
                       "evaluated here as their sources write them, with T the target length")
        return out

    def crossover_sentence(self) -> str:
        """The answer to "when does attention overtake the FFN?" for this config."""
        cfg, full, causal = self.cfg, self.crossover, self.crossover_causal

        def times_d(t: int | None) -> str:
            d = cfg.architecture.d_model
            return f" (= {t // d}·d_model)" if t is not None and t % d == 0 else ""

        def share(t: int | None) -> str:  # of the context
            return "never" if t is None else f"{t / cfg.max_seq_len:.3g}×"

        per_layer = parts.flop_per_layer(self.breakdown)
        if not per_layer["ffn"]:  # a model of mixers alone (Mamba2): nothing for attention to overtake
            return "No FFN in any layer: the mixers' position mixing has no FFN cost to cross (crossover never)."
        pairs = parts.mixing_parts(cfg)  # each mixer role's (projections, position mixing), attention's first
        scores_ratio = sum(per_layer[m] for _, m in pairs) / per_layer["ffn"]
        attention_ratio = sum(per_layer[p] + per_layer[m] for p, m in pairs) / per_layer["ffn"]
        from tfcalc.architecture.mixer import is_local

        # the first layer whose mixer stops growing: its window or chunk (tfcalc.architecture.mixer), or neither
        window, chunk = next((b.mixer.mask_span(2**62) for b, _ in cfg.architecture.output.kinds()
                              if is_local(b.mixer)), (None, None))
        why = (f"with a sliding window of {window:,} keys the causal scores grow like W·T, not T²" if window else
               f"with chunks of {chunk:,} keys the causal scores grow like C·T, not T²" if chunk else
               "where a mixer's state stops growing, its causal cost grows like T, not T²")
        causal_clause = ("" if cfg.arch == "encoder" else
                         f"; counting only the causal half, at T = {causal.scores_vs_ffn:,} and "
                         f"{causal.attention_vs_ffn:,}"
                         if None not in (causal.scores_vs_ffn, causal.attention_vs_ffn) else
                         f"; counting only the unmasked scores, {_at(causal.scores_vs_ffn)} and "
                         f"{_at(causal.attention_vs_ffn)} ({why})")
        question, mixing, sublayer, scores, whole = self._crossover_names(per_layer)
        return (
            f"When does {question} overtake the FFN in {cfg.name}? Per layer, {mixing} the FFN's FLOPs "
            f"{_at(full.scores_vs_ffn)}{times_d(full.scores_vs_ffn)} and {sublayer}, projections included, "
            f"{_at(full.attention_vs_ffn)}{times_d(full.attention_vs_ffn)}, counting the full T×T square "
            f"({share(full.scores_vs_ffn)} and {share(full.attention_vs_ffn)} "
            f"the {cfg.max_seq_len:,}-token context){causal_clause}. At T = {self.seq:,} {scores} "
            f"{scores_ratio:.1%} of the FFN's FLOPs and {whole} {attention_ratio:.1%}."
        )

    def _crossover_names(self, per_layer: dict[str, int]) -> tuple[str, str, str, str, str]:
        """What the crossover sentence calls (the question's subject, the position mixing with its verb, the
        sub-layer, the mixing and the sub-layer at T): attention's words for a model of attention alone; else
        each mixer's declared role (tfcalc.count.model.parts), where its layers are present."""
        roles = parts.roles(self.cfg)
        if not roles:
            return ("attention", "the attention scores (Q·Kᵀ and attention·V) reach", "the whole attention sub-layer",
                    "the scores are", "the whole attention")
        def lower(title: str) -> str:  # "Delta-rule recurrence" -> "delta-rule ...", "SSM scan" kept
            return title if title[1:2].isupper() else title[:1].lower() + title[1:]

        mixing = ([] if not per_layer["attention_scores"] else ["the attention scores (Q·Kᵀ and attention·V)"]) + [
            f"the {lower(r.mixing_title)}" for r in roles if per_layer[r.mixing]]
        nouns = ([] if not per_layer["attention_scores"] else ["attention"]) + [r.noun for r in roles]
        # "the attention scores ... and the SSM scan reach", "the SSM scan reaches": the verb follows the subject
        verb = "reach" if len(mixing) > 1 or per_layer["attention_scores"] else "reaches"
        return ("the token mixing", f"{' and '.join(mixing)} {verb}", f"the whole mixer sub-layer ({', '.join(nouns)})",
                "the position mixing is", "the whole mixer sub-layer")

    def to_json(self) -> dict[str, Any]:
        b, m = self.breakdown, self.measured
        exact, exact_causal = self.training_exact
        return {
            "preset": self.cfg.name,
            "label": self.model.label,
            "overrides": list(self.model.overrides),
            "batch": self.batch,
            "seq": self.seq,
            "src_seq": self.src_seq,
            "tokens": b.tokens,
            "forward_flops": self.forward,
            "forward_flops_causal": self.forward_causal,
            "training_flops": self.training,
            "training_multiplier": self.training_multiplier,
            "training_flops_no_recompute": count.TRAINING_MULTIPLIER * self.forward,
            "training_flops_recompute": count.RECOMPUTE_MULTIPLIER * self.forward,
            "measured_flops": None if m is None else m.total,
            "measured_device": None if m is None else m.device,
            "measured_breakdown": None if m is None else m.groups,
            "measured_by_module": None if m is None else m.by_module,
            "measured_training_flops": None if m is None else m.training_total,
            "agree": self.agrees,
            "breakdown": b.totals(),
            "breakdown_causal": b.totals(causal=True),
            "attention_share": attention_share(b.totals()),
            "per_layer": b.per_layer(),
            "per_layer_causal": b.per_layer(causal=True),
            **self._by_role_json(),
            "components": b.components(),
            "per_sequence": {"forward": self.forward // self.batch,
                             "forward_causal": self.forward_causal // self.batch},
            "per_token": {"forward": b.per_token(self.forward), "forward_causal": b.per_token(self.forward_causal)},
            "non_matmul": b.non_matmul_by_kind(),
            "non_matmul_total": b.non_matmul_total,
            "crossover_seq": crossover_json(self.crossover),
            "crossover_seq_causal": crossover_json(self.crossover_causal),
            "crossover_answer": self.crossover_sentence(),
            "formulas": [
                {"key": f.key, "name": f.name, "formula": f.formula, "source": f.source, "n_params": f.n_params,
                 "training_flops": f.training_flops, "rel_error": f.rel_error(exact),
                 "rel_error_causal": f.rel_error(exact_causal)}
                for f in self.formulas
            ],
            "decode": None if self.decode is None else {
                "context": self.seq,
                "flops": self.decode,
                "flops_per_sequence": self.decode // self.batch,
                "attention_form": self.cfg.architecture.decode_forms(),
                "flops_naive": self.decode_naive,
                "prefill_flops": self.forward,
                "prefill_flops_causal": self.forward_causal,
                "prefill_over_decode": self.forward / self.decode,
                "prefill_causal_over_decode": self.forward_causal / self.decode,
            },
            "notes": self.notes,
        }

    def _by_role_json(self) -> dict[str, Any]:
        """Where a token mixer is not attention: the breakdowns again with each mixer's FLOPs under the role it
        declares (tfcalc.count.model.parts), beside the keys above, whose attention_proj and attention_scores
        keep meaning the whole token-mixer sub-layer; {} for a model of attention alone (its JSON unchanged)."""
        if not parts.roles(self.cfg):
            return {}
        b = self.breakdown
        return {"breakdown_by_role": self.parts, "breakdown_by_role_causal": parts.flop_totals(b, causal=True),
                "per_layer_by_role": parts.flop_per_layer(b),
                "per_layer_by_role_causal": parts.flop_per_layer(b, causal=True),
                "shares_by_role": {k: n / self.forward for k, n in self.parts.items()},
                "mixer_share": self.mixer_share, **parts.roles_json(self.cfg)}


def build_flops(model: ModelRef, workload: Workload = Workload(), measure: bool = False, device: str = "meta",
                training: bool = False, recompute: bool = False) -> FlopsReport:
    """The analytic count; with measure, the real module under FlopCounterMode on device (meta: no memory)."""
    w = workload.for_model(model.cfg)
    breakdown = count.breakdown(model.cfg, w)  # its src_seq set only where a source is read
    measured = None
    if measure:
        from tfcalc.measure.flops import measure_flops  # imports torch: only when asked

        if device.strip().lower() != "meta":
            from tfcalc.measure.device import resolve_device

            device = resolve_device(device).name  # an unknown or absent device: one line, exit 2
        measured = measure_flops(model.cfg, w, device, training=training)
    return FlopsReport(model, w, recompute, breakdown, measured)
