"""The performance model against published figures (benchmarks/calibration.py): each group's share of
figures within [0.8, 1.25] of the published value must not fall (a regression fails here), the exact
memory rows stay exact, docs/predictions.md's table is the script's output, and the README's one paragraph on
how good the predictions are quotes the script's pass rates."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# issue 20 asks 80 % in every group (first-token latency reached it with the runtime's fixed work per
# request, tfcalc.count.perf.hardware's request_s: 3 of 4 before, LLaMA 7B at 128 tokens 0.74)
FLOOR = {"training throughput": 0.8, "iteration time": 0.8, "inference throughput": 0.8,
         "first-token latency": 0.8}


@pytest.fixture(scope="module")
def calibration():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        module = importlib.import_module("calibration")
        return module, module.evaluate(module.rows())
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_pass_rates_per_group(calibration):
    module, results = calibration
    rates = module.pass_rates(results)
    for group, floor in FLOOR.items():
        ok, n = rates[group]
        assert ok / n >= floor, (group, ok, n, [round(x["ratio"], 2) for x in results if x["group"] == group])
    ok, n = rates["memory"]
    assert ok == n == 4  # ZeRO's model states, to the published rounding


def test_every_row_runs_through_the_api_at_defaults(calibration):
    _, results = calibration
    assert len([x for x in results if not x["held_out"]]) == 10 + 8 + 13 + 4 + 4
    assert [x for x in results if x["held_out"]]  # held-out figures reported beside, never fitted
    assert all(x["predicted"] > 0 for x in results)


def test_docs_table_is_the_scripts(calibration):
    module, results = calibration
    page = (ROOT / "docs" / "predictions.md").read_text(encoding="utf-8")
    assert module.BEGIN in page and module.END in page, "docs/predictions.md lacks the calibration table's markers"
    section = page[page.index(module.BEGIN) + len(module.BEGIN):page.index(module.END)]
    assert section.strip() == module.markdown(results).strip(), "run: python benchmarks/calibration.py --readme"


def test_readme_summary_quotes_the_pass_rates(calibration):
    """The README says "all N rows of the calibration set ... and M of the K held-out rows do": N, M and K
    are the script's, so the summary cannot outlive a change of the model."""
    module, results = calibration
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    paragraph = readme.split("## How good are the predictions", 1)[1].split("## ", 1)[0]
    said = re.search(r"all (\d+) rows of the calibration set .*? and (\d+) of the (\d+) held-out rows do", paragraph)
    assert said, "the README's paragraph no longer says how many rows fall within the band"
    rates, held = module.pass_rates(results), module.pass_rates(results, held_out=True)
    ok, n = sum(r[0] for r in rates.values()), sum(r[1] for r in rates.values())
    held_ok, held_n = sum(r[0] for r in held.values()), sum(r[1] for r in held.values())
    assert ok == n, "a calibration row left the band: the README's 'all' is no longer true"
    assert tuple(map(int, said.groups())) == (n, held_ok, held_n)
    assert "(docs/predictions.md)" in paragraph
