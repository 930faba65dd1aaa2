"""`infer --tp`'s collectives against the real model under DTensor tensor parallelism on 2 gloo ranks
(tfcalc.measure.serving_tp): the same calls and bytes, op by op, for a prefill and a one-token step."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import tiny

from tfcalc.count.serving import serving_tp
from tfcalc.measure.serving_tp import measure


def _summed(calls: list[dict]) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = {}
    for c in calls:
        assert c["group"] == "tp"
        total = out.setdefault(c["op"], [0, 0])
        total[0] += 1
        total[1] += c["payload_bytes"]
    return {op: tuple(v) for op, v in out.items()}


@pytest.mark.parametrize("changes", [dict(), dict(n_head=4, n_kv_head=2, pos_encoding="rope", norm="rmsnorm",
                                                  gated_ffn=True, activation="silu", d_ff=96)])
def test_measured_collectives_equal_the_prediction(changes):
    cfg = tiny(n_layer=3, d_model=32, vocab_size=64, max_seq_len=32, **changes)  # tied embedding: vocabulary split
    batch, seq = 2, 7
    record = measure(dataclasses.asdict(cfg), 2, batch, seq)
    for phase, queries, decode in (("prefill", seq, False), ("decode", 1, True)):
        predicted: dict[str, tuple[int, int]] = {}
        for op, calls, payload in serving_tp.step_collectives(cfg, batch, queries, 4, decode, tp=2):  # fp32
            n, b = predicted.get(op, (0, 0))
            predicted[op] = (n + calls, b + calls * payload)
        assert _summed(record[phase]) == predicted, phase
        assert predicted["all_reduce"][0] == 1 + 2 * 3
        assert record[f"{phase}_logits_shape"] == [batch, 64]


SMALL = ("--set", "n_layer=2", "--set", "d_model=64", "--set", "n_head=4", "--set", "max_seq_len=32", "--seq", "16",
         "--gen", "4", "--measure", "--tp", "2")


def test_infer_measure_tp_through_the_command_line(cli):
    """`infer --measure --tp 2`: the prediction for the listed device, the collectives measured beside it."""
    r = cli("infer", "gpt2", *SMALL, "--json")
    assert r.code == 0, r.err
    m = r.json()["tensor_parallel"]["measured"]
    assert m["equal"] and m["backend"] == "gloo" and m["world_size"] == 2
    assert m["prefill"]["measured"]["all_reduce"] == {"calls": 5, "payload_bytes": 5 * 16 * 64 * 4}
    assert m["decode"]["measured"]["all_gather"] == {"calls": 1, "payload_bytes": 50258 * 4}  # 2 shards of 25,129
    text = " ".join(cli("infer", "gpt2", *SMALL).out.split())
    assert "Measured on 2 gloo ranks" in text and "equal to the prediction" in text
