"""A device file states or inherits every per-device constant of the performance model, and the output says
where each came from (issue 31: a file without a table ``key:`` silently took 108 SMs and the A100's attention
efficiency, and one row at 128K tokens moved from 2,022 to 2,987 tok/s)."""

from __future__ import annotations

import math

import pytest

from tfcalc import devices
from tfcalc.errors import InputError

# H100 SXM5 from its sources, not from tfcalc's table: the datasheet (dense bf16 989 TFLOP/s, fp8 1979, fp32 67,
# 3.35 TB/s, NVLink 4 at 450 GB/s per direction, one 400 Gb/s NIC per GPU), the H100 whitepaper (132 SMs, Table 2),
# Bekman's MAMF table (792.1 of 989 bf16, 1402.6 of 1979 fp8, to 3 places) and FlashAttention-3's Fig. 5-6 (FA2 on an
# H100 SXM5, head dim 128, 8K tokens: 333 TFLOP/s forward with the causal mask, 318 backward as FlashAttention's
# benchmark counts it, 2.5 forwards: × 2/2.5 in tfcalc's 2-forward convention).
FA2_H100 = [333 / 989, 318 * 2 / 2.5 / 989]
DATASHEET = ("name: My H100\npeak_flops: {fp32: 67.0e12, bf16: 989.0e12, fp16: 989.0e12, fp8: 1979.0e12}\n"
             "bandwidth_bytes_per_s: 3.35e12\nintra_node_bytes_per_s: 450.0e9\ninter_node_bytes_per_s: 50.0e9\n"
             "gpus_per_node: 8\nhost_memory_bytes: 2199023255552\n"
             f"memory_bytes: {devices.usable_bytes(devices.by_key('h100-sxm'))}\n")
STATED = ("perf: {sm_count: 132, matmul_ceiling: 0.801, fp8_ceiling: 0.709, sustained_clock: 1.0, "
          f"flash_efficiency: [{FA2_H100[0]!r}, {FA2_H100[1]!r}], kernel_s: 2.67e-6, static_power_w: 85, "
          "gpu_variation: 0.08}\n")
# kernel_s: tfcalc's H100 run; static_power_w: an idle H100's draw; gpu_variation: Sinha et al.'s 8 %
# (tfcalc.count.perf.hardware)
FIELDS = ("sm_count", "matmul_ceiling", "fp8_ceiling", "sustained_clock", "flash_efficiency", "kernel_s",
          "static_power_w", "gpu_variation")
PLAN = ("plan", "llama2-7b", "--tp", "8", "--seq", "4096", "--json")


def _file(tmp_path, text, name="mine.yaml"):
    path = tmp_path / name
    path.write_text(DATASHEET + text)
    return str(path)


def test_a_file_stating_every_constant_answers_as_the_table_device(cli, tmp_path):
    table = cli(*PLAN, "--device-spec", "h100-sxm").json()
    mine = cli(*PLAN, "--device-spec", _file(tmp_path, STATED)).json()
    assert mine["step_time_s"] == pytest.approx(table["step_time_s"], rel=1e-12)
    assert mine["tokens_per_s"] == pytest.approx(table["tokens_per_s"], rel=1e-12)
    assert mine["step"]["perf"]["constants_from"] == dict.fromkeys(FIELDS, "the device file")
    assert table["step"]["perf"]["constants_from"] == dict.fromkeys(FIELDS, "h100-sxm (built-in)")
    infer = ("infer", "llama2-7b", "--seq", "4000", "--gen", "16", "--json")
    t, m = cli(*infer, "--device-spec", "h100-sxm").json(), cli(*infer, "--device-spec", _file(tmp_path, STATED)).json()
    assert m["predicted"]["decode_s_per_token"] == pytest.approx(t["predicted"]["decode_s_per_token"], rel=1e-12)
    assert m["predicted"]["prefill_s"] == pytest.approx(t["predicted"]["prefill_s"], rel=1e-12)
    assert m["ceilings"]["device_constants"]["sm_count"] == {"value": 132, "from": "the device file"}
    assert m["ceilings"]["device_constants"]["flash_efficiency"] == {"value": FA2_H100, "from": "the device file"}


@pytest.mark.parametrize("inherit", ["inherits: h100-sxm\n", "key: h100-sxm\n", "inherits: H100-SXM\n"])
def test_a_file_inheriting_a_table_device_answers_as_it(cli, tmp_path, inherit):
    table = cli(*PLAN, "--device-spec", "h100-sxm").json()
    mine = cli(*PLAN, "--device-spec", _file(tmp_path, inherit)).json()
    assert mine["step_time_s"] == pytest.approx(table["step_time_s"], rel=1e-12)
    assert mine["step"]["perf"]["constants_from"] == dict.fromkeys(FIELDS, "h100-sxm, inherited")


def test_a_file_stating_some_and_inheriting_the_rest(cli, tmp_path):
    j = cli(*PLAN, "--device-spec", _file(tmp_path, "inherits: a100-80gb\nperf: {sm_count: 132}\n")).json()
    where = j["step"]["perf"]["constants_from"]
    assert where["sm_count"] == "the device file" and j["step"]["perf"]["sm_count"] == 132
    assert where["flash_efficiency"] == "a100-80gb, inherited" and j["step"]["perf"]["flash_efficiency"] == [0.6, 0.45]
    assert j["step"]["perf"]["sustained_clock"] == pytest.approx(1305 / 1410)  # the A100's HPL clock


def test_a_file_that_inherits_nothing_says_which_defaults_it_took(cli, tmp_path):
    path = _file(tmp_path, "")
    j = cli(*PLAN, "--device-spec", path).json()
    assert j["step"]["perf"]["constants_from"]["sm_count"] == "default, the A100's"
    assert j["step"]["perf"]["constants_from"]["flash_efficiency"] == "default, the A100's"
    assert j["step"]["perf"]["sm_count"] == 108 and j["step"]["perf"]["flash_efficiency"] == [0.6, 0.45]
    # the defaults are not the H100's: the answer differs from the table device's (the issue's silent fallback)
    assert j["step_time_s"] != pytest.approx(cli(*PLAN, "--device-spec", "h100-sxm").json()["step_time_s"], rel=1e-6)
    for command in (PLAN[:-1], ("infer", "llama2-7b", "--seq", "1024", "--gen", "16")):
        text = " ".join(cli(*command, "--device-spec", path).out.split())
        assert "Device constants: sm_count 108 (default, the A100's)" in text
        assert "flash_efficiency 0.6/0.45 FlashAttention-2 (default, the A100's)" in text
        assert "inherits:" in text  # how to say it instead


def test_the_table_devices_print_no_constants_line(cli):
    assert "Device constants" not in cli(*PLAN[:-1], "--device-spec", "h100-sxm").out


@pytest.mark.parametrize(("extra", "message"), [
    ("inherits: h100-sxn\n", "field 'inherits': unknown device 'h100-sxn' (did you mean 'h100-sxm'"),
    ("inherits: 3\n", "field 'inherits' must name a device of the table"),
    ("key: a100-80gb\ninherits: h100-sxm\n", "'key: a100-80gb' and 'inherits: h100-sxm' name two devices"),
    ("perf: [132]\n", "field 'perf' must map constants to values"),
    ("perf: {sm_cout: 132}\n", "perf: unknown constant 'sm_cout'"),
    ("perf: {sm_count: 1.5}\n", "field 'perf.sm_count' must be an integer from 1"),
    ("perf: {sm_count: true}\n", "field 'perf.sm_count' must be an integer from 1"),
    ("perf: {sm_count: -132}\n", "field 'perf.sm_count' must be an integer from 1"),
    ("perf: {matmul_ceiling: -0.5}\n", "field 'perf.matmul_ceiling' must be a number in [0.0001, 1]"),
    ("perf: {matmul_ceiling: .nan}\n", "field 'perf.matmul_ceiling' must be a number in [0.0001, 1]"),
    ("perf: {fp8_ceiling: .inf}\n", "field 'perf.fp8_ceiling' must be a number in [0.0001, 1]"),
    ("perf: {sustained_clock: 1.5}\n", "field 'perf.sustained_clock' must be a number in [0.0001, 1]"),
    ("perf: {matmul_ceiling: '0.8'}\n", "field 'perf.matmul_ceiling' must be a number in [0.0001, 1]"),
    ("perf: {flash_efficiency: [0.3]}\n", "field 'perf.flash_efficiency' must be [forward, backward]"),
    ("perf: {flash_efficiency: [0.3, .nan]}\n", "field 'perf.flash_efficiency[1]' must be a number"),
    ("perf: {attention_kernel: fa4}\n", "field 'perf.attention_kernel' must be one of fa2, cudnn, fa3"),
    ("perf: {attention_kernel: 2}\n", "field 'perf.attention_kernel' must be one of fa2, cudnn, fa3"),
    ("perf: {attention_kernel: fa3, flash_efficiency: [0.5, 0.4]}\n", "'attention_kernel' and 'flash_efficiency' "
     "both set"),
    ("perf: {kernel_s: 4}\n", "field 'perf.kernel_s' must be seconds per kernel from 0 to 0.001"),
    ("perf: {kernel_s: -1.0e-6}\n", "field 'perf.kernel_s' must be seconds per kernel"),
    ("perf: {kernel_s: .nan}\n", "field 'perf.kernel_s' must be seconds per kernel"),
    ("perf: {kernel_s: true}\n", "field 'perf.kernel_s' must be seconds per kernel"),
    ("perf: {static_power_w: -5}\n", "field 'perf.static_power_w' must be watts from 0 to 10,000"),
    ("perf: {static_power_w: .nan}\n", "field 'perf.static_power_w' must be watts"),
    ("perf: {static_power_w: '88'}\n", "field 'perf.static_power_w' must be watts"),
    ("perf: {gpu_variation: 1}\n", "field 'perf.gpu_variation' must be a fraction in [0, 1)"),
    ("perf: {gpu_variation: -0.1}\n", "field 'perf.gpu_variation' must be a fraction"),
    ("perf: {gpu_variation: .nan}\n", "field 'perf.gpu_variation' must be a fraction"),
    ("perf: {gpu_variation: true}\n", "field 'perf.gpu_variation' must be a fraction"),
])
def test_hostile_device_constants_are_one_line_refusals(cli, tmp_path, extra, message):
    path = _file(tmp_path, extra)
    with pytest.raises(InputError, match=None) as e:
        devices.load_spec(path)
    assert message in str(e.value) and "\n" not in str(e.value) and "mine.yaml" in str(e.value)
    r = cli("plan", "gpt2", "--device-spec", path)
    assert r.code != 0 and "Traceback" not in r.err + r.out
    assert message in " ".join((r.err + r.out).split())


def test_stated_constants_are_what_the_model_runs_with(tmp_path):
    from tfcalc.count.perf.hardware import device_perf

    perf = device_perf(devices.load_spec(_file(tmp_path, STATED)))
    assert (perf.sm_count, perf.matmul_ceiling, perf.fp8_ceiling, perf.sustained_clock) == (132, 0.801, 0.709, 1.0)
    assert perf.flash_efficiency == tuple(FA2_H100) and not math.isnan(perf.bandwidth_efficiency)


@pytest.mark.parametrize("kernel,fwd,bwd", [("fa2", 333, 318), ("cudnn", 529, 518), ("fa3", 602, 559)])
def test_an_attention_kernel_by_name_takes_its_published_h100_rates(cli, tmp_path, kernel, fwd, bwd):
    """FlashAttention-3's Fig. 5 (forward, causal, head dim 128, 8K) and Fig. 6 (backward, 8K, counted as 2.5
    forwards): the efficiencies the plan runs attention at, and the kernel named in the output."""
    from tfcalc.count.perf.hardware import device_perf

    path = _file(tmp_path, f"inherits: h100-sxm\nperf: {{attention_kernel: {kernel}}}\n")
    perf = device_perf(devices.load_spec(path))
    assert perf.flash_efficiency == pytest.approx((fwd / 989, bwd * 0.8 / 989), rel=1e-12)
    assert perf.attention_kernel == kernel and dict(perf.constants_from)["flash_efficiency"] == "the device file"
    name = {"fa2": "FlashAttention-2", "cudnn": "cuDNN", "fa3": "FlashAttention-3"}[kernel]
    out = " ".join(cli("plan", "llama2-7b", "--tp", "8", "--seq", "4096", "--device-spec", path).out.split())
    assert f"flash_efficiency {fwd / 989:.3g}/{bwd * 0.8 / 989:.3g} {name} (the device file)" in out


def test_an_attention_kernel_by_name_needs_a_hopper(cli, tmp_path):
    path = _file(tmp_path, "inherits: a100-80gb\nperf: {attention_kernel: fa3}\n")
    r = cli("plan", "llama2-7b", "--tp", "8", "--device-spec", path)
    text = " ".join((r.err + r.out).split())
    assert r.code != 0 and "Traceback" not in text
    assert "perf.attention_kernel takes the kernels' H100 measurements" in text


def test_a_faster_attention_kernel_shortens_the_step(cli, tmp_path):
    plan = ("plan", "llama3-8b", "--dp", "8", "--zero", "3", "--seq", "8192", "--json", "--device-spec")
    fa2, cudnn = (cli(*plan, _file(tmp_path, f"inherits: h100-sxm\nperf: {{attention_kernel: {k}}}\n", f"{k}.yaml"))
                  .json() for k in ("fa2", "cudnn"))
    table = cli(*plan, "h100-sxm").json()
    assert cudnn["step_time_s"] < fa2["step_time_s"] == pytest.approx(table["step_time_s"], rel=1e-12)


def test_the_fp8_note_names_the_files_ceiling_or_the_inherited_devices(cli, tmp_path):
    fp8 = ("plan", "llama2-7b", "--tp", "8", "--compute-dtype", "fp8", "--device-spec")
    stated = " ".join(cli(*fp8, _file(tmp_path, "inherits: h200\nperf: {fp8_ceiling: 0.5}\n", "a.yaml")).out.split())
    assert "FP8 GEMM ceiling (0.500 of the FP8 peak, the device file)" in stated
    inherited = " ".join(cli(*fp8, _file(tmp_path, "inherits: h200\n", "b.yaml")).out.split())
    assert "FP8 GEMM ceiling (0.734 of the FP8 peak, MAMF FP8 H200 SXM 1453.4/1979)" in inherited  # Bekman's table
