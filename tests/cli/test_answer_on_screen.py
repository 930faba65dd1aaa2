"""The answer is always on screen: at 60, 80, 120 and 200 columns every figure of a command's JSON answer
is somewhere in its table render (as the table formats it), and no cell is cut.

A figure that lived only in a column hidden on a narrow terminal ('How', 'fits') failed this on the
tables of memory --budget, plan and infer before hidden cells were written by row below the table and
the answers moved into the rows' labels. The words test (tests/cli/test_render_widths.py) stays."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from tfcalc import units
from tfcalc.cli.render import backends

WIDTHS = (60, 80, 120, 200)


def render(doc, width: int) -> str:
    buffer = io.StringIO()
    backends.write_rich(doc, Console(file=buffer, width=width, color_system=None), False)
    return buffer.getvalue()


def flat(text: str) -> str:
    """The render as one line of words: a figure wrapped at a space ('12.55\\nGiB') is still found."""
    return " ".join(text.split())


def forms(value) -> set[str]:
    """Every way a table of tfcalc writes value (tfcalc.units, one formatter per column unit)."""
    if isinstance(value, bool):
        return {"yes", "fits"} if value else {"no", "does not fit"}
    if isinstance(value, str):
        return {value}
    out = {f"{value:,}"} if isinstance(value, int) else set()
    for f in (units.params, units.flop, units.nbytes):
        out |= {f(value), f(value, exact=True)}
    for f in (units.seconds, units.share, units.tokens_rate, units.flop_rate, units.byte_rate, units.ratio):
        out.add(f(value))
    if isinstance(value, float) and value >= 86400:
        out.add(f"{value / 86400:,.1f} days")
    if isinstance(value, float) and value > 1000:
        out.add(units.tokens_rate(value))
    if isinstance(value, float) and 0 < value < 1:
        out.add(f"{value:.1%}")
    return out


def missing(text: str, answer: dict) -> list[str]:
    """The keys of answer whose value is nowhere in text."""
    words = flat(text)
    return [f"{k}={v!r}" for k, v in answer.items()
            if v is not None and not any(re.search(rf"(?<![\d.,]){re.escape(f)}(?![\d])", words) for f in forms(v))]


def assert_on_screen(doc, answer: dict) -> None:
    for width in WIDTHS:
        text = render(doc, width)
        assert "…" not in text, text
        assert not [line for line in text.splitlines() if len(line.rstrip()) > width], text
        gone = missing(text, answer)
        assert not gone, (width, gone, text)


def test_the_check_finds_a_figure_and_misses_an_absent_one():
    assert not missing("Weights  12.55 GiB", {"w": 13476831232})
    assert missing("Weights  12.55 GiB", {"w": 13476831233 * 2})
    assert missing("largest batch at seq 4,096", {"max_batch": 5})


def test_memory_budget_answers_at_every_width():
    """`memory llama2-7b --budget 24GiB` at 80 columns printed 'largest context at batch 1' with no number."""
    import tfcalc
    from tfcalc.cli.render import memory as view

    r = tfcalc.memory("llama2-7b", budget="24GiB")
    j = r.to_json()
    assert_on_screen(view.document([r]), {
        "weights": j["weights_bytes"], "kv": j["kv_cache_bytes"], "activations": j["activation_bytes"],
        "training": j["training_bytes"], "max_seq": j["fit"]["max_seq"], "max_batch": j["fit"]["max_batch"],
        "budget": j["fit"]["budget_bytes"]})
    text = flat(render(view.document([r]), 80))
    assert f"largest context at batch 1: {j['fit']['max_seq']:,} tokens" in text
    assert f"largest batch at seq 4,096: {j['fit']['max_batch']}" in text


def test_plan_answers_at_every_width():
    """At 80 columns `plan llama2-70b --tp 8 --pp 2 --dp 4 --zero 1 --tokens 2T` lost tokens/s, MFU, the training
    time's GPU-hours and the 'does not fit' verdict."""
    import tfcalc
    from tfcalc.cli.render import plan as view

    r = tfcalc.plan("llama2-70b", tp=8, pp=2, dp=4, zero=1, tokens="2T")
    j = r.to_json()
    answer = {f"per_rank.{k}": v for k, v in j["per_rank"].items() if k.endswith("bytes") and v}
    answer |= {"step_time_s": j["step_time_s"], "tokens_per_s": j["tokens_per_s"], "mfu": j["step"]["mfu"],
               "fits": j["fits"], "days": j["training"]["seconds"], "steps": j["training"]["steps"],
               "chinchilla": units.params(j["training"]["chinchilla_tokens"])}
    assert_on_screen(view.document([r]), answer)
    assert "Total: does not fit" in flat(render(view.document([r]), 60))


@pytest.mark.parametrize("name", ["llama2-7b", "gpt2", "mixtral-8x7b", "t5-base"])
def test_infer_verdicts_at_every_width(name):
    """`infer llama2-7b --batch 1,8,64` hid that batch 64 does not fit (136 GiB of KV cache) at 80 columns."""
    import tfcalc
    from tfcalc.cli.render import infer as view

    r = tfcalc.infer(name, batch=[1, 8, 64], device_spec="h100-sxm")
    rows = r.to_json()
    rows = rows if isinstance(rows, list) else [rows]
    for row in rows:
        p = row["predicted"]
        assert_on_screen(view.document([r]), {
            "prefill_s": p["prefill_s"], "decode_s_per_token": p["decode_s_per_token"],
            "decode_tokens_per_s": p["decode_tokens_per_s"], "total": p["decode_tokens_per_s_total"],
            "bytes_per_token": p["bytes_per_token"], "kv": row["kv_cache_bytes"], "fits": row["fits"],
            "bound": p["bound"]})


@pytest.mark.parametrize("name", __import__("tfcalc.presets", fromlist=["x"]).preset_names())
def test_every_preset_counts_at_every_width(name):
    """params, flops and memory of every preset: the contract's figures (DESIGN.md, JSON contract)."""
    from tfcalc.cli.render import flops as flops_view, memory as memory_view, params as params_view
    from tfcalc.report import resolve
    from tfcalc.report.flops import build_flops
    from tfcalc.report.memory import MemoryOptions, estimate_memory
    from tfcalc.report.params import build_params
    from tfcalc.workload import Workload

    model = resolve(name)
    p = build_params(model, measure=False)
    assert_on_screen(params_view.document([p]), {"analytic_total": p.to_json()["analytic_total"]})
    f = build_flops(model, Workload(seq=min(512, model.cfg.max_seq_len)))
    j = f.to_json()
    assert_on_screen(flops_view.document([f], training=True), {
        k: j[k] for k in ("forward_flops", "forward_flops_causal", "training_flops")})
    m = estimate_memory(model, Workload(), MemoryOptions(budget=80 * 2**30))
    j = m.to_json()
    answer = {k: j[k] for k in ("weights_bytes", "kv_cache_bytes", "activation_bytes", "training_bytes")}
    if j["fit"]["weights_fit"]:
        answer |= {"max_seq": j["fit"]["max_seq"], "max_batch": j["fit"]["max_batch"]}
    assert_on_screen(memory_view.document([m]), answer)


def numbers(d: dict, prefix: str = "") -> dict:
    """Every number of a JSON object, nested objects flattened ('crossover_seq.scores_vs_ffn')."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= numbers(v, f"{prefix}{k}.")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{prefix}{k}"] = v
    return out


@pytest.mark.parametrize("name", ["llama2-7b", "gpt2", "mixtral-8x7b", "t5-base", "bert-base"])
def test_scan_answers_at_every_width(name):
    """Every number of `scan --json`: each length's row and the model's. The forward FLOPs of a length were
    drawn only as a bar, and the weights' bytes were not on screen at all."""
    import tfcalc
    from tfcalc.cli.render import scan as view

    r = tfcalc.scan(name)
    j = r.to_json()
    answer = numbers({k: v for k, v in j.items() if k != "rows"})
    for row in j["rows"]:
        answer |= {f"T={row['seq']}.{k}": v for k, v in numbers(row).items()}
    assert_on_screen(view.document([r]), answer)


def test_compare_answers_at_every_width():
    """Every number of `compare --json`, for a dense decoder, a mixture of experts, an encoder-decoder and an
    encoder."""
    import tfcalc
    from tfcalc.cli.render import compare as view

    r = tfcalc.compare("gpt2", "llama2-7b", "mixtral-8x7b", "t5-base", "bert-base")
    answer = {f"{row['preset']}.{k}": v for row in r.to_json() for k, v in numbers(row).items()}
    assert_on_screen(view.document([r]), answer)


def test_presets_answers_at_every_width():
    """Every number of `presets --json`: mixtral-8x7b's active parameters (12.88B of 46.7B) were nowhere."""
    from tfcalc.cli.render import presets as view
    from tfcalc.report.presets import build_presets

    r = build_presets()
    answer = {f"{row['name']}.{k}": v for row in r.to_json() for k, v in numbers(row).items()}
    assert any(k == "mixtral-8x7b.active_params" for k in answer)
    assert_on_screen(view.document([r]), answer)
