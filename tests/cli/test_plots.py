"""Both plots: one tick style (1K, 4K on x; 1M, 10G on y, or bytes as the tables write them), the
predicted decode line drawn under the roofs it sits on, and fonts sized for a slide."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")


def _drawn(monkeypatch, draw):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    draw()
    fig = kept[0]
    fig.canvas.draw()
    return fig


@pytest.fixture
def figures(monkeypatch, tmp_path):
    from tfcalc.cli.render import plot
    from tfcalc.report import resolve
    from tfcalc.report.scan import build_scan
    from tfcalc.report.scan_decode import build_decode_scan

    scan = build_scan(resolve("llama2-7b"), [128 * 2**i for i in range(10)]).to_json()
    decode = build_decode_scan(resolve("llama2-7b"), [2**i for i in range(11)], 4096).to_json()
    return {"scan": _drawn(monkeypatch, lambda: plot.scan_plot(scan, tmp_path / "s.png")),
            "decode": _drawn(monkeypatch, lambda: plot.decode_plot(decode, tmp_path / "d.png"))}


def _labels(axis) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]


def test_one_tick_style_for_both(figures):
    for name, fig in figures.items():
        for ax in fig.axes:
            xs, ys = _labels(ax.xaxis), _labels(ax.yaxis)
            assert xs and ys, name
            assert not any("$" in t or "^" in t for t in xs + ys), (name, xs, ys)  # no 10^k mathtext
            assert all(t[-1].isdigit() or t[-1] in "KMGTPE" or t.endswith("iB") for t in xs + ys), (name, xs, ys)


def test_the_roofs_are_drawn_over_the_predicted_line(figures):
    total = figures["decode"].axes[0]
    lines = {line.get_label(): line for line in total.get_lines()}
    predicted = lines["predicted (each matmul: the slower roof)"]
    for roof in ("memory roof: bytes ÷ bandwidth", "compute roof: FLOPs ÷ peak"):
        assert lines[roof].get_zorder() > predicted.get_zorder()
        assert lines[roof].get_linewidth() > predicted.get_linewidth() and lines[roof].get_alpha() < 1


def test_fonts_sized_for_a_slide(figures):
    for name, fig in figures.items():
        texts = [fig._suptitle] + [t for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts,
                                                                  *ax.get_xticklabels(), *ax.get_yticklabels(),
                                                                  *ax.get_legend().get_texts())]
        small = {t.get_text(): t.get_fontsize() for t in texts if t.get_text() and t.get_fontsize() < 11}
        assert not small, (name, small)
