"""Request values: one Workload and one Layout carry what a command is asked, every options object is built
by keyword (no call site depends on the order of 14 fields), and measure and count take the Workload."""

import dataclasses

import pytest

from tfcalc.measure.bench_run import BenchPlan
from tfcalc.measure.decode import DecodePlan
from tfcalc.presets import load
from tfcalc.report.infer_options import InferOptions
from tfcalc.report.memory import MemoryOptions
from tfcalc.report.plan import PlanRequest
from tfcalc.workload import Layout, Workload, decoder_source


@pytest.mark.parametrize("kind", [Workload, Layout, InferOptions, MemoryOptions, PlanRequest, BenchPlan, DecodePlan],
                         ids=lambda k: k.__name__)
def test_options_are_keyword_only(kind):
    fields = dataclasses.fields(kind)
    assert all(f.kw_only for f in fields)
    with pytest.raises(TypeError):
        kind(*([1] * len(fields)))


def test_layout_single_is_the_memory_request_on_one_gpu():
    w = Workload(batch=4, seq=512, dtype="fp16").for_model(load("gpt2"))
    L = Layout.single(w, recompute="full", attention="math")
    assert (L.tp, L.pp, L.dp, L.micro_batch, L.micro_batches, L.seq, L.dtype) == (1, 1, 1, 4, 1, 512, "fp16")
    assert (L.recompute, L.attention, L.dropout) == ("full", "math", False)
    assert "math attention" in L.describe()


def test_one_rule_for_the_source_a_decoder_reads():
    t5, gpt2 = load("t5-base"), load("gpt2")
    assert decoder_source(t5, 128, None) == 128 and decoder_source(t5, 128, 64) == 64
    assert decoder_source(gpt2, 128, None) is None
    assert Workload(seq=128).for_model(t5).src_seq == 128
    assert Workload(seq=128).for_model(gpt2).src_seq is None


def test_measure_takes_the_workload():
    """The source length reaches the real module through the Workload, no loose src_seq: an encoder-decoder's
    measured FLOPs on meta equal the analytic count at S != T."""
    from tfcalc.count.model.flops import forward_flops
    from tfcalc.measure.flops import measure_flops

    cfg = dataclasses.replace(load("t5-base"), n_layer=1, n_encoder_layer=1)
    w = Workload(batch=2, seq=16, src_seq=40)
    assert measure_flops(cfg, w).total == forward_flops(cfg, Workload(batch=2, seq=16, src_seq=40))
