"""The only module that prints: Rich tables for people, JSON for programs, one-line errors on stderr.

Colour follows Rich's rules: none when stdout is not a terminal, none when NO_COLOR is set.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tfcalc.count import params as count
from tfcalc.count.flops import CROSS_GROUPS

if TYPE_CHECKING:
    from tfcalc.cli.flops import FlopsReport
    from tfcalc.cli.memory import MemoryReport
    from tfcalc.cli.params import ParamsReport


@lru_cache(maxsize=None)
def console() -> Console:
    # Piped output gets a generous fixed width rather than Rich's default 80 columns.
    return Console(width=None if sys.stdout.isatty() else 140, highlight=False)


def error(message: str) -> None:
    print(f"tfcalc: error: {message}", file=sys.stderr)


def warn(message: str) -> None:
    print(f"tfcalc: warning: {message}", file=sys.stderr)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def print_json_reports(reports: list[Any]) -> None:
    """The JSON contract: one object for one preset, a list for several."""
    data = [r.to_json() for r in reports]
    print_json(data[0] if len(data) == 1 else data)


# ---------- number formatting ----------


def human(n: float) -> str:
    """124439808 -> '124.4M'; 174604259328 -> '174.6B'."""
    for unit, size in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:g}"


def _scaled(n: int, base: int, units: tuple[str, ...]) -> str:
    value, unit = float(n), units[0]
    for unit in units:
        if value < base or unit == units[-1]:
            break
        value /= base
    return f"{value:.1f} {unit}" if unit != units[0] else f"{n} {unit}"


def gbytes(n: int) -> str:
    """Decimal units only, for table cells whose header says GB = 10⁹ bytes: '497.8 MB'."""
    return _scaled(n, 1000, ("B", "kB", "MB", "GB", "TB"))


def nbytes(n: int) -> str:
    """Both decimal and binary units, named: '497.8 MB (474.7 MiB)'."""
    return f"{gbytes(n)} ({_scaled(n, 1024, ('B', 'KiB', 'MiB', 'GiB', 'TiB'))})"


def share(fraction: float) -> str:
    """0.316 -> '31.6%'; a non-zero share too small for one decimal reads '<0.1%', not '0.0%'."""
    return "<0.1%" if 0 < fraction < 0.0005 else f"{fraction:.1%}"


def shape(dims: tuple[int, ...]) -> str:
    return " × ".join(str(d) for d in dims)


# ---------- tfcalc params ----------

_GROUP_TITLES = {
    "embeddings": "Embeddings",
    "attention": "Attention",
    "cross_attention": "Cross-attention",
    "ffn": "FFN",
    "norms": "Norms",
    "pooler": "Pooler",
    "lm_head": "LM head",
}


def _params_table(r: ParamsReport) -> Table:
    cfg, total = r.cfg, r.analytic_total
    title = cfg.name
    if r.nominal_rel_difference is not None:  # the source's rounded size, and how far the exact count is from it
        title += f"  ·  named {cfg.nominal_params}, exact count {r.nominal_rel_difference:+.1%} from it"
    caption = cfg.source or None
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    table.add_column("Component")
    table.add_column("Shape", justify="right")
    table.add_column("× copies", justify="right")
    table.add_column("Parameters", justify="right")
    table.add_column("Share", justify="right")
    _component_rows(table, r, total)
    if cfg.pos_encoding in ("sinusoidal", "rope", "alibi", "none"):
        table.add_row(Text(f"  positions: {cfg.pos_encoding} (no parameters)", style="dim"), "", "", "", "")
    table.add_section()
    table.add_row(Text("Total, analytic", style="bold"), "", "", Text(f"{total:,}", style="bold"), human(total))
    if r.empirical is not None:
        ok = r.agrees
        mark = Text("✓ agree", style="green") if ok else Text("✗ DISAGREE", style="bold red")
        table.add_row("Total, empirical (meta module)", "", "", f"{r.empirical_total:,}", mark)
    else:
        table.add_row(Text("Total, empirical: not measured (--no-measure)", style="dim"), "", "", "", "")
    if cfg.n_expert:
        table.add_row(
            f"Active per token (top-{cfg.experts_active} of {cfg.experts} experts)", "", "",
            f"{r.active_params:,}", f"{r.active_params / total:.1%}",
        )
    table.add_row(
        f"Approximation {count.seeds_formula(cfg)}", "", "", f"{r.approximation:,}",
        f"{r.approximation_rel_error:+.2%}",
    )
    for dtype, size in r.weights_bytes.items():
        table.add_row(f"Weights, {dtype}", "", "", nbytes(size), "")
    return table


def params_reports(reports: list[ParamsReport], as_json: bool) -> None:
    if as_json:
        print_json_reports(reports)
        return
    out = console()
    for r in reports:
        out.print(_params_table(r))
        for note in r.notes:
            out.print(Text(f"Note: {note}", style="yellow"))
        out.print()
    if len(reports) > 1:
        out.print(_params_summary(reports))


def _params_summary(reports: list[ParamsReport]) -> Table:
    table = Table(title="Summary", title_justify="left")
    for name in ("Preset", "Analytic", "Empirical", "Active", "Named", "Approx. error", "Attention", "FFN",
                 "bf16 weights"):
        table.add_column(name, justify="left" if name == "Preset" else "right")
    for r in reports:
        total, groups = r.analytic_total, r.groups
        empirical = "—" if r.empirical is None else ("✓" if r.agrees else "✗ " + f"{r.empirical_total:,}")
        attention = groups["attention"] + groups["cross_attention"]
        table.add_row(
            r.cfg.name, f"{total:,}", empirical, human(r.active_params) if r.cfg.n_expert else "—",
            r.cfg.nominal_params or "—", f"{r.approximation_rel_error:+.2%}",
            f"{attention / total:.1%}", f"{groups['ffn'] / total:.1%}", gbytes(2 * total),
        )
    return table


# ---------- tfcalc presets / show ----------


def presets_table(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json(rows)
        return
    table = Table(title="Presets (tfcalc params NAME)", title_justify="left")
    columns = [
        ("name", "Name"), ("aliases", "Aliases"), ("kind", "Kind"), ("layers", "Layers"), ("d_model", "d_model"),
        ("heads", "Heads q/kv"), ("d_head", "d_head"), ("d_ff", "d_ff"), ("vocab_size", "Vocab"),
        ("max_seq_len", "Context"), ("params", "Params"), ("nominal_params", "Named"),
    ]
    for key, title in columns:
        table.add_column(title, justify="left" if key in ("name", "aliases", "kind") else "right")
    for row in rows:
        cells = dict(row, aliases=", ".join(row["aliases"]), heads=f"{row['n_head']}/{row['n_kv_head']}",
                     params=human(row["params"]), nominal_params=row["nominal_params"] or "—",
                     kind=_kind(row), layers=_layers(row))
        table.add_row(*(str(cells[key]) for key in dict(columns)))
    console().print(table)


def show_config(text: str) -> None:
    sys.stdout.write(text)


# ---------- tfcalc flops ----------

_FLOP_GROUP_TITLES = {
    "attention_proj": "Attention projections",
    "attention_scores": "Attention scores",
    "cross_attention_proj": "Cross-attention projections",
    "cross_attention_scores": "Cross-attention scores",
    "ffn": "FFN",
    "pooler": "Pooler",
    "lm_head": "LM head",
}


def _matmul_shape(shape: tuple[int, int, int]) -> str:
    m, k, n = shape
    return f"{m}×{k} @ {k}×{n}"


def _agree_mark(ok: bool) -> Text:
    return Text("✓ agree", style="green") if ok else Text("✗ DISAGREE", style="bold red")


def _flops_table(r: FlopsReport) -> Table:
    cfg, b, fwd = r.cfg, r.breakdown, r.forward
    title = f"{cfg.name}  ·  B = {r.batch}, T = {r.seq:,}  ·  forward matmul FLOPs (2·m·k·n, full T×T square)"
    table = Table(title=title, caption=cfg.source or None, title_justify="left", caption_justify="left")
    for name in ("Component", "Matmul (m×k @ k×n)", "× matmuls", "Per layer", "Total", "Per token", "Share"):
        table.add_column(name, justify="left" if name == "Component" else "right")
    per_layer, totals = b.per_layer(), b.totals()
    for group, title_ in _FLOP_GROUP_TITLES.items():
        entries = [e for e in b.entries if e.group == group]
        if not entries:  # a kind without it: no cross-attention in a decoder, no LM head in BertModel
            continue
        alone = entries[0] if len(entries) == 1 and entries[0].copies == 1 else None  # the LM head: one row
        table.add_row(
            Text(title_, style="bold"), _matmul_shape(alone.shape) if alone else "", str(alone.count) if alone else "",
            Text(f"{per_layer[group]:,}" if group in per_layer else "", style="bold"),
            Text(f"{totals[group]:,}", style="bold"), f"{b.per_token(totals[group]):,}", f"{totals[group] / fwd:.1%}",
        )
        for e in [] if alone else entries:
            table.add_row(f"  {e.label}", _matmul_shape(e.shape), f"{e.count:,}", f"{e.per_copy:,}", f"{e.total:,}", "", "")
    table.add_row(Text("Embeddings: lookups, 0 FLOPs", style="dim"), "", "", "", "0", "0", "0.0%")
    table.add_section()
    table.add_row(Text("Forward, full T×T square", style="bold"), "", "", "", Text(f"{fwd:,}", style="bold"),
                  f"{b.per_token(fwd):,}", human(fwd))
    causal = r.forward_causal
    table.add_row("Forward, causal (unmasked scores only)", "", "", f"{b.per_layer(True)['attention_scores']:,}",
                  f"{causal:,}", f"{b.per_token(causal):,}", f"{causal / fwd:.1%}")
    for mult, label in ((3, "Training ×3 (forward + backward)"), (4, "Training ×4 (full recompute)")):
        style = "bold" if mult == r.training_multiplier else ""
        table.add_row(Text(label, style=style), "", "", "", f"{mult * fwd:,}", f"{b.per_token(mult * fwd):,}", human(mult * fwd))
    m = r.measured
    if m is not None:
        table.add_row(f"Measured forward ({m.device})", "FlopCounterMode", "", "", f"{m.total:,}", "",
                      _agree_mark(bool(r.agrees)))
        if m.training_total is not None:
            table.add_row(f"Measured training ({m.device})", "forward + backward", "", "", f"{m.training_total:,}",
                          "", f"×{m.training_total / m.total:.4g}")
    else:
        table.add_row(Text("Measured: not run (--measure)", style="dim"), "", "", "", "", "", "")
    table.add_section()
    table.add_row(Text("Non-matmul, approximate", style="bold"), "FLOPs × elements", "", "",
                  Text(f"{b.non_matmul_total:,}", style="bold"), f"{b.per_token(b.non_matmul_total):,}",
                  f"+{b.non_matmul_total / fwd:.2%}")
    for e in b.non_matmul:
        table.add_row(f"  {e.label}", f"{e.per_element} × {e.elements:,}", f"{e.copies:,}", "", f"{e.total:,}", "", "")
    return table


def _formulas_table(r: FlopsReport) -> Table:
    exact, exact_causal = r.training_exact
    table = Table(title=f"{r.cfg.name}: training FLOPs, B = {r.batch}, T = {r.seq:,}: the standard formulas",
                  title_justify="left")
    for name in ("Formula", "Expression", "Source", "N", "Training FLOPs", "vs full square", "vs causal"):
        table.add_column(name, justify="right" if name not in ("Formula", "Expression", "Source") else "left")
    table.add_row(Text("Exact, full square", style="bold"), "3 × forward", "tfcalc", "", f"{exact:,}", "", "")
    table.add_row(Text("Exact, causal", style="bold"), "3 × forward", "tfcalc", "", f"{exact_causal:,}", "", "")
    for f in r.formulas:
        table.add_row(f.name, f.formula, f.source, "—" if f.n_params is None else f"{f.n_params:,}",
                      f"{f.training_flops:,}", f"{f.rel_error(exact):+.2%}", f"{f.rel_error(exact_causal):+.2%}")
    return table


def _decode_table(r: FlopsReport) -> Table:
    decode, b = r.decode, r.breakdown
    table = Table(title=f"{r.cfg.name}: decode with a KV cache at context T = {r.seq:,} against prefill (B = {r.batch})",
                  title_justify="left")
    for name in ("", "FLOPs", "Per token", "÷ decode"):
        table.add_column(name, justify="left" if not name else "right")
    table.add_row("Decode: 1 new token per sequence, scores against T cached keys", f"{decode:,}",
                  f"{decode // r.batch:,}", "")
    table.add_row(f"Prefill: {r.seq:,} tokens, full square", f"{r.forward:,}", f"{b.per_token(r.forward):,}",
                  f"{r.forward / decode:,.1f}")
    table.add_row(f"Prefill: {r.seq:,} tokens, causal", f"{r.forward_causal:,}",
                  f"{b.per_token(r.forward_causal):,}", f"{r.forward_causal / decode:,.1f}")
    return table


def flops_reports(reports: list[FlopsReport], as_json: bool, show_training: bool = False, show_decode: bool = False) -> None:
    if as_json:
        print_json_reports(reports)
        return
    out = console()
    for r in reports:
        out.print(_flops_table(r))
        out.print(Text(r.crossover_sentence()))
        for note in r.notes:
            out.print(Text(f"Note: {note}", style="yellow"))
        if show_training:
            out.print()
            out.print(_formulas_table(r))
        if show_decode and r.decode is not None:
            out.print()
            out.print(_decode_table(r))
        out.print()
    if len(reports) > 1:
        out.print(_flops_summary(reports))


def _flops_summary(reports: list[FlopsReport]) -> Table:
    table = Table(title="Summary (forward, full square)", title_justify="left")
    for name in ("Preset", "B × T", "Forward", "Causal", "Measured", "Attention", "FFN", "LM head",
                 "Crossover scores / attention"):
        table.add_column(name, justify="left" if name == "Preset" else "right")
    for r in reports:
        totals, fwd, x = r.breakdown.totals(), r.forward, r.crossover
        measured = "—" if r.measured is None else ("✓" if r.agrees else f"✗ {r.measured.total:,}")
        attention = sum(totals[g] for g in ("attention_proj", "attention_scores") + CROSS_GROUPS)
        table.add_row(
            r.cfg.name, f"{r.batch} × {r.seq:,}", human(fwd), human(r.forward_causal), measured,
            f"{attention / fwd:.1%}", f"{totals['ffn'] / fwd:.1%}", f"{totals['lm_head'] / fwd:.1%}",
            f"{x.scores_vs_ffn:,} / {x.attention_vs_ffn:,}",
        )
    return table


# ---------- tfcalc memory ----------

_ACTIVATION_LABELS = {
    "attn_norm": "attention norm (input; stats)", "qkv_input": "QKV input", "qkv": "Q, K, V",
    "rope_qk": "rotated Q, K (RoPE)", "attn_scores": "softmax scores (s²)", "softmax_stats": "log-sum-exp (fp32)",
    "attn_output": "attention output", "ffn_norm": "FFN norm (input; stats)", "ffn_input": "FFN input",
    "ffn_hidden": "FFN hidden", "dropout": "dropout masks", "final_norm": "final norm",
    "lm_head_input": "LM-head input", "log_probs": "log-probs (fp32)",
    "moe_routing": "MoE: routed inputs, outputs, weights", "cross_attn_norm": "cross-attention norm (input; stats)",
    "cross_q_input": "cross-attention Q input", "cross_qkv": "cross-attention Q; K, V of the source",
    "cross_attn_scores": "cross-attention softmax (T×S)", "cross_softmax_stats": "cross-attention log-sum-exp",
    "cross_attn_output": "cross-attention output",
}


def _memory_table(r: MemoryReport) -> Table:
    cfg = r.cfg
    table = Table(title=f"{cfg.name}  ·  {r.dtype}  ·  batch {r.batch}  ·  seq {r.seq:,}", title_justify="left",
                  caption="GB = 10⁹ bytes, GiB = 2³⁰ bytes", caption_justify="left")
    for name, justify in (("Memory", "left"), ("Bytes", "right"), ("GB (GiB)", "right"), ("How", "left")):
        table.add_column(name, justify=justify)

    def row(label: Any, n: int | None, how: str = "", bold: bool = False) -> None:
        style = "bold" if bold else ""
        cells = ("—", "—") if n is None else (f"{n:,}", nbytes(n))
        table.add_row(Text(label, style=style) if isinstance(label, str) else label, *cells, Text(how, style="dim"))

    heads = f"{cfg.kv_heads} KV heads of {cfg.n_head}" + (" (GQA)" if 1 < cfg.kv_heads < cfg.n_head else
                                                          " (MQA)" if cfg.kv_heads == 1 < cfg.n_head else "")
    row("Weights", r.weights, f"{r.params:,} params × {r.dtype}")
    if cfg.arch == "encoder":
        row("KV cache", r.kv_cache, "none: an encoder generates no tokens")
    else:
        row("KV cache", r.kv_cache, f"2·B·T·L·n_kv·d_head; {heads}")
    if r.cross_kv_cache:
        row("  of which cross-attention", r.cross_kv_cache, f"2·B·S·L·n_kv·d_head, S = {r.src_seq:,} source tokens")
    row("Forward working set", r.working_set, "no-grad pass, largest stage, no cache")
    row("Inference: weights + KV cache", r.inference_bytes, "", bold=True)
    a, s = r.activations, r.state
    table.add_section()
    if a is None or s is None:
        table.add_row(Text(f"Training: not modelled for {r.dtype} (an inference format)", style="dim"), "", "", "")
    else:
        row("Gradients", s.gradients, f"in {r.dtype}")
        if s.master_weights:
            row("Master weights", s.master_weights, "fp32")
        row("Optimizer state", s.optimizer_state, {"sgd": "none (plain SGD)"}.get(s.optimizer, "Adam moments m, v"))
        stack = "decoder " if a.n_encoder_layer else ""
        row(f"Activations kept, per {stack}layer ({a.attention} attention)", a.layer, "")
        for key, n in a.per_layer.items():
            if n:
                row(f"  {_ACTIVATION_LABELS[key]}", n, "")
        if a.n_encoder_layer:
            row(f"Activations kept, per encoder layer (S = {r.src_seq:,})", a.encoder_layer, "")
        row("Activations kept, all layers + head", a.stored,
            f"recompute {a.recompute}" + (": block inputs only" if a.recompute == "full" else ""))
        if a.recompute_extra:
            row("  + one block rebuilt in backward", a.recompute_extra, "")
        row("  + loss gradients at backward start", a.loss_gradients, "fp32 log-probs and logits")
        row("Activation peak", a.total, "", bold=True)
        row("  Korthikanti et al. 2022, eq. 1", r.korthikanti, "L·sbh(34 + 5as/h): 16-bit, dropout, no flash")
        if s.step_temporaries > a.total:
            row("Optimizer step temporaries", s.step_temporaries, "exceed the activations: they set the peak")
        row(f"Training total ({s.optimizer})", r.training_bytes,
            f"state {s.bytes_per_param:.4g} B/param + activations", bold=True)
    if r.measured is not None:
        m = r.measured
        table.add_section()
        row(f"Estimate of this run ({'training step' if r.training else 'forward pass'})", r.run_estimate, "")
        row(f"Measured peak on {m.device}", m.peak_bytes, f"{r.ratio:.3f} × estimate; {m.method}", bold=True)
        if m.saved_activation_bytes is not None and a is not None:
            row("Activations saved by autograd, measured", m.saved_activation_bytes,
                f"{m.saved_activation_bytes / a.stored:.4f} × estimate (kept, all layers + head)")
    if r.fit is not None:
        _fit_rows(table, r)
    return table


def _fit_rows(table: Table, r: MemoryReport) -> None:
    fit, target = r.fit, ("training state + activations" if r.training else "weights + KV cache")
    table.add_section()
    label = Text(f"Budget {nbytes(fit.budget)}: {target}", style="bold")
    table.add_row(label, f"{fit.budget:,}", "", "")
    if not fit.weights_fit:
        what = "the training state" if r.training else "the weights"
        table.add_row(Text(f"  {what} alone do not fit", style="red"), f"{fit.fixed_bytes:,}", nbytes(fit.fixed_bytes), "")
        return
    beyond = f" (beyond the model's context, {r.cfg.max_seq_len:,})" if fit.max_seq > r.cfg.max_seq_len else ""
    seq_text = f"{fit.max_seq:,} tokens{beyond}" if fit.max_seq else "none: not even 1 token"
    batch_text = f"{fit.max_batch:,}" if fit.max_batch else "none: not even batch 1"
    table.add_row(f"  largest context at batch {r.batch}", "", "", seq_text)
    table.add_row(f"  largest batch at seq {r.seq:,}", "", "", batch_text)


def memory_reports(reports: list[MemoryReport], as_json: bool) -> None:
    if as_json:
        print_json_reports(reports)
        return
    out = console()
    for r in reports:
        out.print(_memory_table(r))
        out.print()
    if len(reports) > 1:
        table = Table(title="Summary (GB = 10⁹ bytes)", title_justify="left")
        for name in ("Preset", "Weights", "KV cache", "Activations", "Training total", "Measured"):
            table.add_column(name, justify="left" if name == "Preset" else "right")
        for r in reports:
            cells = (r.weights, r.kv_cache, r.activations and r.activations.total, r.training_bytes,
                     r.measured and r.measured.peak_bytes)
            table.add_row(r.cfg.name, *("—" if n is None else gbytes(n) for n in cells))
        out.print(table)


# ---------- progress ----------


@contextmanager
def progress(description: str, total: int, enabled: bool = True) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr while work runs; yields the function to call after each step.
    Quiet when disabled (--json) or when stderr is not a terminal."""
    if not (enabled and sys.stderr.isatty()):
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


# ---------- tfcalc bench ----------


def seconds(s: float) -> str:
    """0.00123 -> '1.23 ms'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def rate(flops_per_s: float | None) -> str:
    return "—" if flops_per_s is None else f"{flops_per_s / 1e12:.3g} TFLOP/s" if flops_per_s >= 1e12 else f"{flops_per_s / 1e9:.3g} GFLOP/s"


def bench_rows(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json(rows[0] if len(rows) == 1 else rows)
        return
    first = rows[0]
    where = first["device_name"] if first["device_name"].startswith(first["device"]) else f"{first['device_name']} ({first['device']})"
    title = (f"{first['preset']} forward on {where}, {first['dtype']}, "
             f"batch {first['batch']}, {first['samples']} timed calls after {first['warmup']} warm-up")
    table = Table(title=title, title_justify="left")
    for name in ("seq", "median", "p10 … p90", "tokens/s", "achieved", "of ceiling", "MFU",
                 "attention: time / FLOPs", "peak memory"):
        table.add_column(name, justify="right")
    for r in rows:
        c = r["components"]
        table.add_row(
            str(r["seq"]), seconds(r["median_s"]), f"{seconds(r['p10_s'])} … {seconds(r['p90_s'])}",
            f"{r['tokens_per_s']:,.0f}", rate(r["achieved_flops_per_s"]), f"{r['ceiling_fraction']:.0%}",
            "—" if r["mfu"] is None else f"{r['mfu']:.1%}",
            f"{c['attention_time_share']:.0%} / {c['attention_flop_share']:.0%}",
            "—" if r["peak_memory_bytes"] is None else gbytes(r["peak_memory_bytes"]),
        )
    out = console()
    out.print(table)
    notes = [f"Matmul ceiling ({first['dtype']}, measured here the same way): {rate(first['matmul_ceiling_flops_per_s'])}; "
             f"datasheet peak: {rate(first['peak_flops_per_s']) if first['peak_flops_per_s'] else 'unknown for this device, so no MFU'}."]
    if first["extrapolated"]:
        notes.append(f"Ran {first['n_layer_run']} of {first['n_layer']} blocks; the full-depth time adds the missing "
                     f"blocks at the median time of one block timed alone (measured forward: "
                     f"{seconds(first['measured_forward_median_s'])}).")
    notes.append("Attention time/FLOPs: one block's attention sub-layer against its FFN sub-layer, timed alone; "
                 "a time share above the FLOP share is memory-bound work (softmax, reshapes, KV reads).")
    notes.append("Achieved FLOP/s counts the analytic forward FLOPs, full T×T attention square.")
    if first["compiled"]:
        notes.append("The forward pass ran torch.compile'd; the sub-layer and head timings use the eager modules.")
    for note in notes:
        out.print(Text(note, style="dim"))


# ---------- tfcalc snapshot / check ----------


def snapshot_written(path, data: dict[str, Any]) -> None:
    names = ", ".join(e["preset"] for e in data["entries"])
    console().print(f"Wrote {path}: {len(data['entries'])} models ({names}), tfcalc {data['tfcalc_version']}.")


def check_result(path, data: dict[str, Any], drifts: list, as_json: bool) -> None:
    if as_json:
        print_json([{"preset": d.preset, "field": d.field, "expected": d.expected, "got": d.got,
                     "difference": d.difference} for d in drifts])
        return
    if not drifts:
        console().print(Text(f"✓ {path}: all counts of {len(data['entries'])} models match.", style="green"))
        return
    table = Table(title=f"{path}: {len(drifts)} counts drifted", title_justify="left", title_style="bold red")
    for name in ("Preset", "Field", "Expected", "Got", "Difference"):
        table.add_column(name, justify="left" if name in ("Preset", "Field") else "right")

    def cell(x: Any) -> str:
        return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else str(x)

    for d in drifts:
        diff = d.difference
        table.add_row(d.preset, d.field, cell(d.expected), cell(d.got),
                      "—" if diff is None else (f"{diff:+,}" if isinstance(diff, int) else f"{diff:+.6g}"))
    console().print(table)


# ---------- tfcalc compare ----------

_COMPARE_ROWS = [
    ("n_layer", "layers", str), ("d_model", "d_model", str), ("n_head", "query heads", str),
    ("n_kv_head", "KV heads", str), ("d_head", "d_head", str), ("d_ff", "d_ff", str),
    ("vocab_size", "vocab", str), ("max_seq_len", "context", str), ("pos_encoding", "positions", str),
    ("norm", "norm", str), ("ffn", "FFN", str), ("tie_embeddings", "tied head", lambda v: "yes" if v else "no"),
    ("params", "parameters", lambda v: f"{human(v)} ({v:,})"),
    ("weights_bytes", "weights", gbytes),
    ("seq", "at seq", str),
    ("forward_flops_per_token", "forward FLOPs / token", human),
    ("training_flops_per_token", "training FLOPs / token", human),
    ("kv_cache_bytes_per_token", "KV cache / token", gbytes),
    ("attention_param_share", "attention share of params", share),
    ("ffn_param_share", "FFN share of params", share),
    ("attention_flop_share", "attention share of FLOPs", share),
    ("ffn_flop_share", "FFN share of FLOPs", share),
]


def compare_table(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json(rows)
        return
    first = rows[0]
    table = Table(title=f"Compared with {first['preset']} (differences highlighted; bytes in {first['kv_dtype']}, "
                        "GB = 10⁹ bytes)", title_justify="left")
    table.add_column("")
    for r in rows:
        table.add_column(r["preset"], justify="right")
    for key, label, fmt in _COMPARE_ROWS:
        cells = [Text(fmt(r[key]), style="" if i == 0 or r[key] == first[key] else "bold yellow")
                 for i, r in enumerate(rows)]
        table.add_row(label, *cells)
    console().print(table)


# ---------- tfcalc scan ----------

# (key, characters, style): the characters tell the parts apart without colour (NO_COLOR, plain files)
_SCAN_PARTS = (("attention_scores", "█", "red"), ("attention_proj", "▓", "dark_orange"),
               ("ffn", "▒", "blue"), ("lm_head", "░", "grey50"))


def _share_bar(row: dict[str, Any], width: int = 32) -> Text:
    bar = Text()
    used = 0
    for i, (key, char, style) in enumerate(_SCAN_PARTS):
        n = width - used if i == len(_SCAN_PARTS) - 1 else round(width * row[key] / row["forward_flops"])
        n = max(0, min(n, width - used))
        bar.append(char * n, style=style)
        used += n
    return bar


def scan_report(report: dict[str, Any], as_json: bool, plot_path=None) -> None:
    if as_json:
        print_json(dict(report, plot=str(plot_path) if plot_path else None))
        return
    crossover = report["crossover_seq"]
    table = Table(title=f"{report['preset']}: forward FLOPs and memory against sequence length (batch "
                        f"{report['batch']}, bytes in {report['dtype']}, GB = 10⁹ bytes)", title_justify="left")
    for name in ("T", "scores", "projections", "FFN", "LM head", "scores share", "KV cache", "activations"):
        table.add_column(name, justify="right")
    legend = "  ".join(f"{char} {name}" for (key, char, _), name in zip(_SCAN_PARTS, ("scores", "projections", "FFN", "head")))
    table.add_column(f"shares of forward: {legend}")
    table.add_column("crossover", style="bold red")
    marked = set()
    for r in report["rows"]:
        marks = []
        for key, text in (("scores_vs_ffn", "scores ≥ FFN"), ("attention_vs_ffn", "attention ≥ FFN")):
            if r["seq"] >= crossover[key] and key not in marked:
                marked.add(key)
                marks.append(text)
        beyond = r["seq"] > report["max_seq_len"]
        seq_cell = Text(f"{r['seq']:,}" + ("*" if beyond else ""), style="bold" if marks else "")
        table.add_row(
            seq_cell, human(r["attention_scores"]), human(r["attention_proj"]), human(r["ffn"]), human(r["lm_head"]),
            share(r["scores_share"]), gbytes(r["kv_cache_bytes"]),
            gbytes(r["activation_bytes"]),
            _share_bar(r), "◀ " + ", ".join(marks) if marks else "",
        )
    out = console()
    out.print(table)
    out.print(f"Per layer, attention scores reach the FFN's FLOPs at T = {crossover['scores_vs_ffn']:,} and the whole "
              f"attention sub-layer (projections + scores) at T = {crossover['attention_vs_ffn']:,} (full-square convention).")
    if any(r["seq"] > report["max_seq_len"] for r in report["rows"]):
        out.print(Text(f"* beyond the context length {report['max_seq_len']:,}: arithmetic only.", style="dim"))
    if plot_path:
        out.print(f"Plot written to {plot_path}.")


# ---------- kinds of transformer (encoder, encoder-decoder, mixture of experts) ----------


def _component_rows(table: Table, r: ParamsReport, total: int) -> None:
    """The breakdown rows, group by group; an encoder-decoder's in an Encoder and a Decoder section."""
    cfg = r.cfg
    sections = [("", r.entries)]
    if cfg.arch == "encoder-decoder":
        layers = {"encoder": cfg.encoder_layers, "decoder": cfg.decoder_layers}
        sections = [(stack, [e for e in r.entries if e.stack == stack]) for stack in count.STACKS]
    for stack, entries in sections:
        indent = "  " if stack else ""
        if stack:
            n = sum(e.total for e in entries)
            title = f"{stack.capitalize()} ({layers[stack]} layers)"
            table.add_row(Text(title, style="bold underline"), "", "", Text(f"{n:,}", style="bold"), share(n / total))
        for group in count.GROUPS:
            in_group = [e for e in entries if e.group == group]
            if not in_group:
                continue
            n = sum(e.total for e in in_group)
            table.add_row(
                Text(indent + _GROUP_TITLES[group], style="bold"), "", "", Text(f"{n:,}", style="bold"),
                share(n / total),
            )
            for e in in_group:
                tied = Text(f"tied to {e.tied_to}: counted once", style="dim")
                count_cell = tied if e.tied_to else f"{e.total:,}"
                copies = f"{e.copies // e.experts} × {e.experts}" if e.experts > 1 else str(e.copies)
                table.add_row(f"{indent}  {e.label}", shape(e.shape), copies, count_cell, "")


def _kind(row: dict[str, Any]) -> str:
    """'decoder', 'encoder', 'enc-dec', with ' MoE 2/8' for a mixture of experts."""
    kind = {"encoder-decoder": "enc-dec"}.get(row["arch"], row["arch"])
    return kind + (f" MoE {row['n_expert_active']}/{row['n_expert']}" if row["n_expert"] else "")


def _layers(row: dict[str, Any]) -> str:
    """'12', or '6+6' (encoder + decoder)."""
    if row["arch"] == "encoder-decoder":
        return f"{row['n_encoder_layer']}+{row['n_layer']}"
    return str(row["n_layer"])
