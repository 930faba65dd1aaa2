"""The report of `tfcalc presets`: every packaged preset, its key shapes and totals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfcalc.count.model.params import active_total, total
from tfcalc.presets import aliases_of, load, preset_names
from tfcalc.report.display import Displayed


def preset_row(name: str) -> dict[str, Any]:
    cfg = load(name)
    return {
        "name": name, "aliases": aliases_of(name), "arch": cfg.arch, "n_layer": cfg.n_layer,
        "n_encoder_layer": cfg.encoder_layers if cfg.arch == "encoder-decoder" else None,
        "n_expert": cfg.n_expert, "n_expert_active": cfg.n_expert_active, "d_model": cfg.d_model,
        "n_head": cfg.n_head, "n_kv_head": cfg.kv_heads, "d_head": cfg.head_dim, "d_ff": cfg.ffn_dim,
        "vocab_size": cfg.vocab_size, "max_seq_len": cfg.max_seq_len, "params": total(cfg),
        "active_params": active_total(cfg), "nominal_params": cfg.nominal_params, "source": cfg.source,
    }


@dataclass(frozen=True, repr=False)
class PresetsReport(Displayed):
    rows: tuple[dict[str, Any], ...]

    def headline(self) -> str:
        return "the packaged presets"

    def to_json(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.rows]


def build_presets() -> PresetsReport:
    return PresetsReport(tuple(preset_row(name) for name in preset_names()))
