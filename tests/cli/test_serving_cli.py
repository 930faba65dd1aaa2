"""`tfcalc infer`, `tfcalc bench --decode`, `tfcalc scan --decode` and `--device-spec list`: the JSON
contract, the hand-worked figures through the command line, measured runs on this CPU with tiny models,
one-line errors, and every table at 80 and 200 columns. No timing thresholds."""

from __future__ import annotations

import io

import pytest
from conftest import assert_one_line_error
from rich.console import Console

import tfcalc
from tfcalc.cli.render import (
    backends,
    decode as decode_view,
    devices as devices_view,
    infer as infer_view,
    scan_decode as scan_decode_view,
)
from tfcalc.report import resolve
from tfcalc.report.devices import build_devices
from tfcalc.report.infer import build_infer
from tfcalc.report.infer_options import InferOptions
from tfcalc.report.scan_decode import build_decode_scan

CONTRACT = {"prefill_s", "decode_s_per_token", "decode_tokens_per_s", "bytes_per_token", "bound",
            "bandwidth_ceiling_bytes_per_s", "predicted"}
TINY = ("--set", "n_layer=1", "--set", "d_model=48", "--set", "vocab_size=64", "--set", "max_seq_len=64")
FAST = ("--warmup", "1", "--repeat", "2", "--copy-size", "1MiB")


def test_infer_hand_worked_llama2_7b_on_h100(cli):
    """One decode step at context 4096 (--seq 4095 --gen 2): the figures of reference.md, through the
    performance model: 15,624,314,880 bytes at the achievable 0.85 × 3.35 TB/s = 5.487 ms (all rows
    memory-bound at batch 1), plus 450 kernels × 2.67 µs (the H100's, measured on tfcalc's runtime:
    tfcalc.count.perf.hardware.KERNEL_S) = 1.20 ms and the non-matmul traffic (~2 µs): 6.69 ms, 149.5 tokens/s
    (the plain roofline's 214 at the datasheet bandwidth, with no kernel cost)."""
    r = cli("infer", "llama2-7b", "--device-spec", "h100-sxm", "--seq", "4095", "--gen", "2", "--json").json()
    assert CONTRACT <= set(r) and CONTRACT - {"predicted"} <= set(r["predicted"])
    assert r["bytes_per_token"] == r["predicted"]["bytes_per_token"] == 15_624_314_880
    over = r["predicted"]["overhead"]["decode_step"]
    assert over["kernels"] == 450 and over["kernel_s"] == pytest.approx(450 * 2.67e-6) and over["dequant_s"] == 0
    # weights + KV read once, the activations beside them (a few MB at batch 1)
    rows = r["roofline"]["first_decode_step"]
    assert all(x["bound"] == "memory" for x in rows)
    step = sum(x["weight_bytes"] + x["kv_bytes"] + x["activation_bytes"] for x in rows) / (0.85 * 3.35e12)
    assert r["decode_s_per_token"] == pytest.approx(step + over["total_s"])
    assert r["decode_tokens_per_s"] == pytest.approx(149.5, abs=0.5) and r["bound"] == "memory"
    assert r["measured"] is False and r["bandwidth_ceiling_bytes_per_s"] is None
    assert r["ceilings"]["ridge_flops_per_byte"] == pytest.approx(989e12 / (0.85 * 3.35e12))
    assert r["weights_bytes"] == 13_476_831_232


def test_infer_the_issue_example(cli):
    rows = cli("infer", "llama2-7b", "--device-spec", "h100-sxm", "--batch", "1,8,64", "--seq", "4096",
               "--gen", "256", "--json").json()
    assert [r["batch"] for r in rows] == [1, 8, 64]
    assert [r["fits"] for r in rows] == [True, True, False]
    # usable memory: the driver's 79.19 GiB (85,027,979,264 bytes) less the CUDA context measured on an H100
    # (714,670,080) = 84,313,309,184 bytes; each sequence's cache of 4,352 positions 2,281,701,376:
    # (84,313,309,184 − 13,476,831,232) // 2,281,701,376 = 31
    assert all(r["max_batch"] == 31 and r["compute_bound_batch"] is None for r in rows)
    assert rows[0]["memory_bytes"] == 84_313_309_184 and rows[0]["datasheet_memory_bytes"] == 80 * 10**9
    # at the ceilings the predicted time uses (each GEMM's achievable share of the peak, the achievable bandwidth):
    # 256 rows fill one row of 256 × 128 tiles (q/k/v/o at 0.754 of the peak: FLOPs 0.96× the bytes' time), the
    # 257th starts a second one (0.418: 1.42×). At the nominal peak the ridge, 347 FLOPs/byte, gave batch 409
    # (tests/count/test_bound_ceilings.py)
    assert rows[0]["weight_matmuls_compute_bound_batch"] == 257 and rows[0]["beyond_context"]
    per_seq = [r["decode_tokens_per_s"] for r in rows]
    total = [r["decode_tokens_per_s_total"] for r in rows]
    assert per_seq == sorted(per_seq, reverse=True) and total == sorted(total)  # batching trades one for the other
    assert rows[1]["kv_cache_bytes"] == 8 * 2 * 4352 * 32 * 4096 * 2
    assert rows[0]["roofline"]["first_decode_step"][0]["component"] == "attn_q"
    text = " ".join(cli("infer", "llama2-7b", "--batch", "1,8,64", "--seq", "4096", "--gen", "256").out.split())
    assert "NVIDIA H100 SXM5 80GB" in text and "never turns compute-bound" in text and "batch 257" in text


def test_infer_quantized_weights_and_cache(cli):
    r = cli("infer", "llama2-7b", "--dtype", "int4", "--kv-dtype", "fp8", "--seq", "4095", "--gen", "2",
            "--json").json()
    assert r["weights_bytes"] == 3_889_307_648 and r["kv_dtype"] == "fp8" and r["compute_dtype"] == "bf16"
    assert r["bytes_per_token"] == 3_889_307_648 + 2_147_483_648 // 2
    assert r["weight_format"]["group_size"] == 128 and r["weight_format"]["zero_point"] is True


def test_infer_on_a_users_device(cli, tmp_path):
    spec = tmp_path / "gpu.yaml"
    spec.write_text("name: Test GPU\npeak_flops: {bf16: 100.0e12}\nbandwidth_bytes_per_s: 1.0e12\n"
                    "memory_bytes: 24.0e9\n")
    r = cli("infer", "llama2-7b", "--device-spec", str(spec), "--seq", "4095", "--gen", "2", "--json").json()
    assert r["device_spec"] == "gpu" and r["device_name"] == "Test GPU" and r["memory_bytes"] == 24 * 10**9
    assert r["decode_s_per_token"] >= 15_624_314_880 / 1e12


def test_infer_measured_on_this_cpu(cli):
    rows = cli("infer", "gpt2", *TINY, "--measure", "--device", "cpu", "--batch", "1,2", "--seq", "8", "--gen",
               "5", *FAST, "--json").json()
    for r in rows:
        assert r["measured"] is True and r["device"] == "cpu" and CONTRACT <= set(r)
        assert r["bandwidth_ceiling_bytes_per_s"] > 0 and r["samples"] == {"prefill": 2, "decode": 4}
        assert r["ratio"]["decode"] == pytest.approx(r["predicted"]["decode_s_per_token"] / r["decode_s_per_token"])
        assert r["predicted"]["ceilings"] == "measured on cpu" and r["mbu"] > 0
    text = cli("infer", "gpt2", *TINY, "--measure", "--seq", "8", "--gen", "3", *FAST).out
    assert "measured beside predicted" in text


def test_bench_decode_contract_on_this_cpu(cli):
    r = cli("bench", "gpt2", *TINY, "--decode", "6", "--seq", "10", "--batch", "2", *FAST, "--json").json()
    assert CONTRACT <= set(r) and r["decode_steps"] == 6 and r["samples"] == {"prefill": 2, "decode": 6}
    assert r["decode_p10_s"] <= r["decode_s_per_token"] <= r["decode_p90_s"]
    assert r["decode_tokens_per_s_total"] == pytest.approx(2 * r["decode_tokens_per_s"])
    assert r["achieved_bandwidth_bytes_per_s"] == pytest.approx(2 * r["bytes_per_token"] / r["decode_s_per_token"])
    # K and V, 1 layer, batch 2, 10 + 6 positions, fp32; gpt2 derives d_head (d_model / n_head), as OpenAI's
    # model.py does, so d_model=48 makes them 12 heads of 4, 48 wide
    assert r["cache_bytes"] == 2 * 1 * 2 * 16 * 48 * 4
    assert r["peak_bandwidth_bytes_per_s"] is None and r["prefill_mfu"] is None  # a CPU has no datasheet
    assert r["bandwidth_ceiling_bytes_per_s"] == min(r["copy_bandwidth_bytes_per_s"], r["read_bandwidth_bytes_per_s"],
                                                     r["matvec_bandwidth_bytes_per_s"])
    several = cli("bench", "gpt2", *TINY, "--decode", "2", "--seq", "4,8", *FAST, "--json").json()
    assert [x["seq"] for x in several] == [4, 8]
    text = " ".join(cli("bench", "gpt2", *TINY, "--decode", "2", "--seq", "4", *FAST).out.split())
    assert "TTFT" in text and "predicted on the roofline" in text


def test_scan_decode_and_its_plot(cli, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "decode.png"
    r = cli("scan", "llama3-8b", "--decode", "--seq", "128", "--batch", "1..4096", "--plot", str(png), "--json").json()
    assert [row["batch"] for row in r["rows"]][:3] == [1, 2, 4] and png.stat().st_size > 10_000
    first = r["compute_bound_batch"]
    assert first is not None  # GQA at a short context: the step does turn compute-bound
    bounds = {row["batch"]: row["bound"] for row in r["rows"]}
    assert all(b == ("compute" if batch >= first else "memory") for batch, b in bounds.items())
    assert r["max_batch"] > 0 and r["plot"] == str(png)


@pytest.mark.parametrize("args, message", [
    (["infer", "bert-base"], "generates no tokens"),
    (["infer", "gpt2", "--device-spec", "h100-sxn"], "did you mean 'h100-sxm'"),
    (["infer", "gpt2", "--measure", "--device-spec", "h100-sxm"], "give one"),
    (["infer", "gpt2", "--device", "cpu"], "without --measure"),
    (["infer"], "give a MODEL"),
    (["infer", "gpt2", "--measure", "--dtype", "int4"], "--measure runs the model as built"),
    (["infer", "gpt2", "--measure", "--gen", "1"], "--gen 2 or more"),
    (["infer", "gpt2", "--dtype", "bf16", "--group-size", "64"], "--group-size applies to"),
    (["infer", "gpt2", "--kv-dtype", "int4"], "not a cache format"),
    (["infer", "gpt2", "--batch", "0"], "--batch"),
    (["infer", "gpt2", "--device-spec", "fp8-only.yaml"], "no such file"),
    (["bench", "gpt2", "--decode", "4", "--compile"], "drop --compile"),
    (["bench", "gpt2", "--decode", "4", "--weights", "nowhere", "--n-layer", "2"], "drop --n-layer, --weights"),
    (["bench", "gpt2", "--decode", "4", "--min-time", "1", "--rounds", "2"], "drop --min-time, --rounds"),
    (["bench", "gpt2", "--decode", "4", "--nproc", "2"], "one of them"),
    (["bench", "gpt2", "--copy-size", "1MiB"], "without --decode"),
    (["bench", "gpt2", "--decode", "4", "--seq", "1024"], "is past gpt2's 1,024 learned positions"),
    (["bench", "bert-base", "--decode", "4"], "generates no tokens"),
    (["scan", "gpt2", "--decode", "--seq", "128,256"], "one context length"),
    (["scan", "gpt2", "--batch", "1,2"], "one batch size"),
    (["scan", "gpt2", "--device-spec", "h100-sxm"], "apply to scan --decode"),
])
def test_bad_serving_input_is_one_line(cli, args, message):
    assert_one_line_error(cli(*args), message)


def test_device_spec_list(cli):
    table = cli("infer", "--device-spec", "list")
    assert table.code == 0 and "h100-sxm" in table.out and "mi300x" in table.out and "datasheet" in table.out
    data = cli("infer", "--device-spec", "list", "--json").json()
    assert {d["key"] for d in data} >= {"h100-sxm", "h100-pcie", "h100-nvl", "h200", "a100-40gb", "a100-80gb", "l40s",
                                        "l4", "a10g", "rtx-4090", "mi300x", "b200"}
    assert all(d["source"] and d["bandwidth_bytes_per_s"] > 0 for d in data)


def test_the_api_returns_what_the_cli_prints(cli):
    api = tfcalc.infer("llama2-70b", batch=[1, 16], seq=2048, gen=8, device_spec="a100-80gb").to_json()
    assert api == cli("infer", "llama2-70b", "--batch", "1,16", "--seq", "2048", "--gen", "8", "--device-spec",
                      "a100-80gb", "--json").json()
    report = tfcalc.bench("gpt2", seq=4, decode=2, warmup=0, repeat=1, matmul_size=16, copy_bytes=1 << 16,
                          n_layer=1, d_model=48, vocab_size=64)
    assert report.to_json()["decode_steps"] == 2


def _render(doc, width: int) -> str:
    buffer = io.StringIO()
    backends.write_rich(doc, Console(file=buffer, width=width, color_system=None), False)
    return buffer.getvalue()


@pytest.mark.parametrize("width", (80, 200))
def test_serving_tables_fit_80_and_200_columns(width):
    model = resolve("mixtral-8x7b")
    infer = build_infer(model, InferOptions(batches=(1, 8, 64), seq=4096, gen=16, dtype="int4"))
    tiny = resolve("gpt2", ["n_layer=1", "d_model=48", "vocab_size=64", "max_seq_len=64"])
    options = InferOptions(batches=(1,), seq=8, gen=3, dtype="fp32", measure=True, warmup=0, repeat=1, matmul_size=16,
                           copy_bytes=1 << 16)
    measured = build_infer(tiny, options)
    docs = [infer_view.document([infer], verbose=True), infer_view.document([measured], verbose=True),
            scan_decode_view.document([build_decode_scan(model, [1, 8, 64, 512], 4096)]),
            devices_view.document([build_devices()]),
            decode_view.document([tfcalc.bench(tiny.cfg, seq=4, decode=2, warmup=0, repeat=1, matmul_size=16,
                                               copy_bytes=1 << 16)], verbose=True)]
    for doc in docs:
        text = _render(doc, width)
        assert "…" not in text
        assert not [line for line in text.splitlines() if len(line.rstrip()) > width]


def test_a_busy_host_is_named_beside_the_timings():
    from tfcalc.cli.render.doc import Doc, Note
    from tfcalc.cli.render.infer import busy_note

    busy, quiet = Doc(), Doc()
    busy_note(busy, {"busy": True, "load_average": 4.5, "cpus": 2})
    busy_note(quiet, {"busy": False, "load_average": 0.5, "cpus": 2})
    assert quiet.blocks == [] and isinstance(busy.blocks[0], Note) and busy.blocks[0].style == "warning"
    assert "load average 4.5 on 2 CPUs" in busy.blocks[0].text
