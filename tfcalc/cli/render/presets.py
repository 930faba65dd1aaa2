"""`tfcalc presets` as a document: one row per packaged preset."""

from __future__ import annotations

from typing import Any

from tfcalc.cli.render.doc import Column, Doc
from tfcalc.report.presets import PresetsReport


def kind(row: dict[str, Any]) -> str:
    """'decoder', 'encoder', 'enc-dec', with ' MoE 2/8' for a mixture of experts."""
    text = {"encoder-decoder": "enc-dec"}.get(row["arch"], row["arch"])
    return text + (f" MoE {row['n_expert_active']}/{row['n_expert']}" if row["n_expert"] else "")


def layers(row: dict[str, Any]) -> str:
    """'12', or '6+6' (encoder + decoder)."""
    return f"{row['n_encoder_layer']}+{row['n_layer']}" if row["arch"] == "encoder-decoder" else str(row["n_layer"])


def document(reports: list[PresetsReport], verbose: bool = False) -> Doc:
    doc = Doc()
    t = doc.table("Presets (tfcalc params NAME)", Column("Name"), Column("Kind"), Column("Layers", "text"),
                  Column("d_model", "int"), Column("Heads q/kv", "text", priority=1),
                  Column("d_head", "int", priority=3),
                  Column("d_ff", "int", priority=2), Column("Vocab", "int", priority=3),
                  Column("Context", "int", priority=2), Column("Params", "params"),
                  Column("Active", "params", priority=1), Column("Named", priority=1),
                  Column("Aliases", priority=4), name="presets")
    for report in reports:
        for row in report.rows:
            t.add(row["name"], kind(row), layers(row), row["d_model"], f"{row['n_head']}/{row['n_kv_head']}",
                  row["d_head"], row["d_ff"], row["vocab_size"], row["max_seq_len"], row["params"],
                  # a mixture of experts' parameters per token (the router's top k of n experts); dense: all
                  row["active_params"] if row["n_expert"] else None, row["nominal_params"] or "—",
                  ", ".join(row["aliases"]) or "—")
    return doc
