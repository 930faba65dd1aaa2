"""`tfcalc params`: parameter counts, analytic (from the config) and empirical (from the real module)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from tfcalc.cli import render
from tfcalc.cli.options import Json, Models, Overrides
from tfcalc.config import ModelConfig
from tfcalc.count import params as count
from tfcalc.count.dtypes import weight_bytes
from tfcalc.presets import load


@dataclass(frozen=True)
class ParamsReport:
    cfg: ModelConfig
    entries: list[count.ParamEntry]
    analytic: dict[str, int]
    empirical: dict[str, int] | None  # None when not measured (--no-measure)

    @property
    def analytic_total(self) -> int:
        return sum(self.analytic.values())

    @property
    def empirical_total(self) -> int | None:
        return None if self.empirical is None else sum(self.empirical.values())

    @property
    def agrees(self) -> bool | None:
        return None if self.empirical is None else self.empirical == self.analytic

    @property
    def approximation(self) -> int:
        return count.seeds_approximation(self.cfg)

    @property
    def approximation_rel_error(self) -> float:
        return (self.approximation - self.analytic_total) / self.analytic_total

    @property
    def groups(self) -> dict[str, int]:
        return count.group_totals(self.cfg, self.analytic)

    @property
    def stacks(self) -> dict[str, int]:
        """{encoder: n, decoder: n} for an encoder-decoder, {} otherwise."""
        return count.stack_totals(self.cfg, self.analytic)

    @property
    def active_params(self) -> int:
        """Parameters one token uses (a MoE runs only its top-k experts); the total when dense."""
        return count.active_params(self.cfg, self.analytic)

    def mismatches(self) -> list[str]:
        """Components whose analytic and empirical counts differ."""
        if self.empirical is None:
            return []
        keys = list(self.analytic) + [k for k in self.empirical if k not in self.analytic]
        return [k for k in keys if self.analytic.get(k) != self.empirical.get(k)]

    @property
    def weights_bytes(self) -> dict[str, int]:
        return {dtype: weight_bytes(self.analytic_total, dtype) for dtype in ("fp32", "bf16")}

    @property
    def notes(self) -> list[str]:
        cfg, notes = self.cfg, []
        note = count.width_note(cfg)
        if note:
            notes.append(note.text(cfg.n_head, cfg.head_dim))
        if cfg.n_expert:
            notes.append(
                f"mixture of experts: each token runs {cfg.experts_active} of the {cfg.experts} experts of each "
                f"block, so {self.active_params:,} of {self.analytic_total:,} parameters are active per token "
                "(router, attention, embeddings, norms and head included); FLOPs per token count only those."
            )
        if cfg.arch == "encoder" and not cfg.lm_head:
            notes.append("no LM head: the model ends in hidden states" + (" and the pooler" if cfg.pooler else "")
                         + ", as Hugging Face's BertModel, the model BERT's published sizes count.")
        return notes

    @property
    def nominal_rel_difference(self) -> float | None:
        """How far the exact count is from the size the source names (which is rounded)."""
        named = count.nominal_value(self.cfg.nominal_params)
        return None if not named else (self.analytic_total - named) / named

    def to_json(self) -> dict[str, Any]:
        total = self.analytic_total
        return {
            "preset": self.cfg.name,
            "analytic_total": total,
            "empirical_total": self.empirical_total,
            "breakdown": self.analytic,
            "arch": self.cfg.arch,
            "active_params": self.active_params,
            "stacks": self.stacks,
            "empirical_breakdown": self.empirical,
            "agree": self.agrees,
            "groups": self.groups,
            "shares": {group: n / total for group, n in self.groups.items()},
            "approximation": {
                "formula": count.seeds_formula(self.cfg),
                "value": self.approximation,
                "rel_error": self.approximation_rel_error,
            },
            "nominal_params": self.cfg.nominal_params,
            "nominal_rel_difference": self.nominal_rel_difference,
            "tied_embeddings": self.cfg.tie_embeddings,
            "weights_bytes": self.weights_bytes,
            "notes": self.notes,
        }


def params_report(cfg: ModelConfig, measure: bool = True) -> ParamsReport:
    empirical = None
    if measure:
        from tfcalc.measure.params import measure_params  # imports torch: only when asked

        _, empirical = measure_params(cfg)
    return ParamsReport(cfg, count.param_entries(cfg), count.breakdown(cfg), empirical)


def params(
    models: Models,
    overrides: Overrides = None,
    json_out: Json = False,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure/--no-measure",
            help="Also build the real module on the meta device (no memory) and count its parameters.",
        ),
    ] = True,
) -> int:
    """Count parameters, analytically from the config and empirically from the instantiated module.

    The empirical count sums numel() over the unique parameters of the real PyTorch module built on the
    meta device (no storage: GPT-3 175B costs no memory); a tied embedding and LM head count once.
    Breakdown by component (an encoder-decoder's by encoder and decoder, cross-attention shown), the
    textbook approximation 12*L*d^2 + V*d beside it (extended to each kind), and weight bytes. For a
    mixture of experts, also the parameters active per token (the top-k experts, router and the rest).
    Exit 1 if the two counts disagree for any preset.
    """
    reports = [params_report(load(m, overrides or []), measure) for m in models]
    render.params_reports(reports, json_out)
    bad = [r for r in reports if r.agrees is False]
    for r in bad:
        render.error(f"{r.cfg.name}: analytic and empirical counts disagree in {', '.join(r.mismatches())}")
    return 1 if bad else 0
