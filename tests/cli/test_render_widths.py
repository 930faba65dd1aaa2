"""Every command's tables at 80 and 200 columns: no cell cut with '…', no line past the width.

Rendered through the real renderers into a Rich console of a fixed width, for every packaged preset
(params, flops, memory, scan) and for the commands that take several models or none."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tfcalc.cli.render import (
    backends,
    bench as bench_view,
    compare as compare_view,
    flops as flops_view,
    memory as memory_view,
    params as params_view,
    presets as presets_view,
    scan as scan_view,
    snapshot as snapshot_view,
)
from tfcalc.presets import preset_names
from tfcalc.report import resolve
from tfcalc.report.compare import build_compare
from tfcalc.report.flops import build_flops
from tfcalc.report.memory import MemoryOptions, estimate_memory
from tfcalc.report.params import build_params
from tfcalc.report.presets import build_presets
from tfcalc.report.scan import build_scan
from tfcalc.report.snapshot import CheckReport, Drift
from tfcalc.workload import Workload

WIDTHS = (80, 200)


def render(doc, width: int, exact: bool = False) -> str:
    buffer = io.StringIO()
    backends.write_rich(doc, Console(file=buffer, width=width, color_system=None), exact)
    return buffer.getvalue()


def assert_readable(text: str, width: int) -> None:
    assert "…" not in text, text
    too_long = [line for line in text.splitlines() if len(line.rstrip()) > width]
    assert not too_long, too_long


def _words(text: str) -> set[str]:
    return {w.strip(",;:()") for w in text.split() if w.strip("─━")}  # rules' length follows the width


def assert_uncropped(doc, width: int, exact: bool = False) -> None:
    """readable, and every word of the render at width is a word of the render at 1,000 columns (or of the
    note naming hidden columns): Rich crops the header of a no-wrap column without a mark ('ba' for
    'batch') when a table cannot fit, and wrapping text at spaces keeps every word whole."""
    narrow = render(doc, width, exact)
    assert_readable(narrow, width)
    headers = [c.header for block in doc.blocks for c in getattr(block, "columns", ())]
    note = f"(at {width} columns, {', '.join(headers)} by row below; a wider terminal shows them as columns)"
    cut = _words(narrow) - _words(render(doc, 1000, exact)) - _words(note)
    assert not cut, (cut, narrow)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", preset_names())
def test_every_preset_every_counting_command(name, width):
    model = resolve(name)
    docs = [
        params_view.document([build_params(model, measure=False)], verbose=False),
        params_view.document([build_params(model, measure=False)], verbose=True),
        flops_view.document([build_flops(model, Workload(seq=min(512, model.cfg.max_seq_len)))], verbose=True,
                            training=True, decode=True),
        memory_view.document([estimate_memory(model, Workload(), MemoryOptions(budget=80 * 2**30))], verbose=True),
        scan_view.document([build_scan(model, [128, 1024, 8192, 65536])]),
    ]
    for doc in docs:
        for exact in (False, True):
            assert_uncropped(doc, width, exact)


@pytest.mark.parametrize("width", WIDTHS)
def test_several_models_summaries_compare_presets_and_check(width):
    models = [resolve(n) for n in ("gpt2", "llama2-70b", "mixtral-8x7b", "transformer-base")]
    docs = [
        params_view.document([build_params(m, measure=False) for m in models]),
        flops_view.document([build_flops(m, Workload(seq=256)) for m in models]),
        memory_view.document([estimate_memory(m, Workload()) for m in models]),
        compare_view.document([build_compare(models[:3])]),
        presets_view.document([build_presets()], verbose=True),
        snapshot_view.check_document([CheckReport("counts.json", 2, (
            Drift("gpt2", "params.breakdown.attn_q_weight", 7_077_888, 7_077_889),
            Drift("llama2-7b", "flops.crossover_seq.scores_vs_ffn", 33_024, 33_025)))]),
    ]
    for doc in docs:
        assert_uncropped(doc, width)


def test_bench_renders_at_both_widths():
    from tfcalc.report.bench import build_bench, plan_bench

    model = resolve("gpt2", ["n_layer=1", "d_model=48", "vocab_size=64", "max_seq_len=32"])
    report = build_bench(model, plan_bench(model, seqs=[16, 32], warmup=0, repeat=2, matmul_size=32, min_time=0))
    for width in WIDTHS:
        assert_uncropped(bench_view.document([report]), width)


def test_hidden_columns_are_named_and_essential_ones_stay():
    text = " ".join(render(presets_view.document([build_presets()]), 80).split())  # the note may wrap anywhere
    assert "(at 80 columns, " in text and "Aliases" in text.split("by row below")[0].split("(at 80 columns")[1]
    assert "mixtral-8x7b" in text and "174.6B" in text  # names and totals are never dropped
    below = text.split("by row below")[1]
    assert "mixtral-8x7b (" in below and "Aliases: " in below  # the hidden cells, by row, under the table
    wide = render(presets_view.document([build_presets()]), 200)
    assert "by row below" not in wide and "Context" in wide


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", [n for n in preset_names() if resolve(n).cfg.arch != "encoder"])
def test_serving_tables_every_generating_preset(name, width):
    """infer (its roofline tables too) and scan --decode, for every preset that generates."""
    import tfcalc
    from tfcalc.cli.render import infer as infer_view, scan_decode as scan_decode_view
    from tfcalc.report.scan_decode import build_decode_scan

    report = tfcalc.infer(name, batch=[1, 8, 64], device_spec="h100-sxm")
    for verbose in (False, True):
        assert_uncropped(infer_view.document([report], verbose=verbose), width)
    scan = build_decode_scan(resolve(name), [1, 2, 4, 1024], None, "bf16", None, None, None)
    assert_uncropped(scan_decode_view.document([scan]), width)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("options", [dict(tp=8, batch=[1, 64]), dict(draft="llama2-7b", accept_rate=0.8, tp=4),
                                     dict(rate=5, mean_input=512, mean_output=256, tp=2),
                                     dict(rate=500, mean_input=512, mean_output=256)])
def test_serving_modes(options, width):
    """infer --tp, --draft and --rate (and over capacity): every table and note within the width."""
    import tfcalc
    from tfcalc.cli.render import infer as infer_view

    report = tfcalc.infer("llama2-70b", device_spec="a100-80gb", **options)
    text = render(infer_view.document([report]), width)
    assert "…" not in text and all(len(line) <= width for line in text.splitlines())
    assert ("Tensor parallel over" in text) == ("tp" in options)
    assert ("Speculative decoding" in text) == ("draft" in options)
    assert ("Continuous batching" in text) == ("rate" in options)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("layout", [dict(gpus=64), dict(tp=8, pp=2, dp=4, zero=1, tokens="2T"),
                                    dict(tp=8, pp=2, dp=4, zero=1, recompute="selective", sequence_parallel=True)])
def test_plan_tables(layout, width):
    import tfcalc
    from tfcalc.cli.render import plan as plan_view

    report = tfcalc.plan("llama2-70b", **layout)
    for verbose in (False, True):
        assert_uncropped(plan_view.document([report], verbose=verbose), width)
