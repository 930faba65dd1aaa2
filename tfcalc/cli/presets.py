"""`tfcalc presets` lists the packaged presets; `tfcalc show` prints a resolved config as YAML."""

from __future__ import annotations

import yaml

from tfcalc.cli import render
from tfcalc.cli.options import Json, Model, Overrides
from tfcalc.count.params import active_total, total
from tfcalc.presets import aliases_of, load, preset_names


def list_presets(json_out: Json = False) -> None:
    """List the packaged presets with their key shapes and analytic parameter totals."""
    rows = []
    for name in preset_names():
        cfg = load(name)
        rows.append({
            "name": name, "aliases": aliases_of(name), "arch": cfg.arch, "n_layer": cfg.n_layer,
            "n_encoder_layer": cfg.encoder_layers if cfg.arch == "encoder-decoder" else None,
            "n_expert": cfg.n_expert, "n_expert_active": cfg.n_expert_active, "d_model": cfg.d_model,
            "n_head": cfg.n_head, "n_kv_head": cfg.kv_heads, "d_head": cfg.head_dim, "d_ff": cfg.ffn_dim,
            "vocab_size": cfg.vocab_size, "max_seq_len": cfg.max_seq_len, "params": total(cfg),
            "active_params": active_total(cfg),
            "nominal_params": cfg.nominal_params, "source": cfg.source,
        })
    render.presets_table(rows, json_out)


def show(model: Model, overrides: Overrides = None, json_out: Json = False) -> None:
    """Print the resolved config (after --set overrides) as YAML: every field, derived sizes written in.

    The output is itself a valid config file: `tfcalc show gpt2 > my.yaml; tfcalc params my.yaml`.
    """
    cfg = load(model, overrides or [])
    data = cfg.resolved()
    if json_out:
        render.print_json(data)
        return
    derived = [f for f, given in (("d_head", cfg.d_head), ("n_kv_head", cfg.n_kv_head), ("d_ff", cfg.d_ff)) if given is None]
    header = f"# tfcalc config: {cfg.name}" + (f" (derived: {', '.join(derived)})" if derived else "") + "\n"
    render.show_config(header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
