"""The API as a notebook user writes it (issue 32): tidy frames, numeric lengths, lists where several models
make sense, "4k" where the command line takes it, errors in the Python argument's name."""

from __future__ import annotations

import pytest

import tfcalc
from tfcalc.errors import InputError

pytest.importorskip("pandas")

GPT2_PARAMS = 124_439_808  # transformers' GPT2LMHeadModel, tied head counted once (OpenAI's "124M")


def test_params_frame_is_one_row_per_component_with_numeric_columns():
    df = tfcalc.params("gpt2", measure=False).to_frame()
    assert df.Parameters.sum() == GPT2_PARAMS and str(df.Parameters.dtype) == "int64"
    assert df.Share.sum() == pytest.approx(1.0)
    rows = dict(zip(df.Component, df.Parameters, strict=True))
    assert rows["Embeddings"] == 50257 * 768 + 1024 * 768  # wte + wpe, by hand
    assert rows["LM head"] == 0  # tied to the embedding: counted there once
    assert not any(c.startswith(("Total", "Approximation")) for c in df.Component)  # totals apart
    assert df.attrs["totals"]["analytic"] == GPT2_PARAMS


def test_an_encoder_decoders_frame_has_its_stacks():
    df = tfcalc.params("t5-base", measure=False).to_frame()
    assert set(df.Stack) == {"encoder", "decoder"} and df.Parameters.sum() == df.attrs["totals"]["analytic"]


def test_scan_frame_lengths_are_integers_with_the_context_apart():
    df = tfcalc.scan("gpt2", seq=[512, 1024, 2048]).to_frame()
    assert df["T"].tolist() == [512, 1024, 2048] and str(df["T"].dtype) == "int64"
    assert df["past context"].tolist() == [False, False, True]  # gpt2's context: 1,024
    assert df["T"].sum() == 3584 and "forward FLOPs" not in df.columns


def test_compare_takes_a_list():
    listed, spread = tfcalc.compare(["gpt2", "llama2-7b"]), tfcalc.compare("gpt2", "llama2-7b")
    assert listed.to_json() == spread.to_json()
    assert [r["preset"] for r in listed.to_json()] == ["gpt2", "llama2-7b"]


@pytest.mark.parametrize("call, same", [
    (lambda: tfcalc.memory("gpt2", seq="4k"), lambda: tfcalc.memory("gpt2", seq=4096)),
    (lambda: tfcalc.flops("gpt2", "2", "1k"), lambda: tfcalc.flops("gpt2", 2, 1024)),
    (lambda: tfcalc.infer("gpt2", batch="1,8", seq="512", gen="1k"),
     lambda: tfcalc.infer("gpt2", batch=[1, 8], seq=512, gen=1024)),
    (lambda: tfcalc.scan("gpt2", seq="256..1k"), lambda: tfcalc.scan("gpt2", seq=[256, 512, 1024])),
    (lambda: tfcalc.plan("gpt2", dp=2, global_batch="1k"), lambda: tfcalc.plan("gpt2", dp=2, global_batch=1000)),
], ids=["memory-seq", "flops-positional", "infer-batches", "scan-range", "plan-count"])
def test_4k_is_read_where_the_command_line_reads_it(call, same):
    assert call().to_json() == same().to_json()


@pytest.mark.parametrize("call, message", [
    (lambda: tfcalc.memory("gpt2", seq="4q"), "seq: cannot read '4q' as a sequence length"),
    (lambda: tfcalc.flops("gpt2", seq=0), "seq must be between 1"),
    (lambda: tfcalc.infer("gpt2", device_spec=3), "device_spec must be"),
    (lambda: tfcalc.plan("gpt2", dp=2, zero=5), "zero must be 0, 1, 2 or 3; got 5"),
], ids=["length-text", "range", "device-spec", "zero"])
def test_errors_name_the_python_argument(call, message):
    with pytest.raises(InputError) as e:
        call()
    assert str(e.value).startswith(message) or message in str(e.value)
    assert "--seq" not in str(e.value) and "--device-spec" not in str(e.value) and "--zero" not in str(e.value)
