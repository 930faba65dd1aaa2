"""The steps of benchmarks/gpu_report.py: each runs one measured command through tfcalc's Python API (the
same code as the command line) and sets tfcalc's prediction beside each measurement.

A step returns {"comparisons": [...], "measured": {...}}; a comparison is
{"quantity", "unit", "predicted", "measured", "ratio", "how"} with ratio = predicted ÷ measured (as in
benchmarks/calibration.py and `bench decode`'s JSON: for a time, below 1 the device ran slower than
predicted). A prediction needs the device-table entry (tfcalc.devices) that the GPU's name matches; without
one (a CPU, a GPU not in the table) predictions are null and the comparison says why.

Predictions, all at tfcalc's defaults (no --mfu, no efficiency flag):
- forward pass (bench): the performance model's forward of a training micro-batch (count.training.micro_batch_time:
  every block's forward GEMMs at their shapes' efficiency, fused attention, non-matmul traffic, kernel costs)
  plus the LM head's forward GEMM over all positions (what `bench` runs), at the datasheet peak;
- matmul ceiling: the n×n GEMM's efficiency (tfcalc.count.perf.gemm) × the datasheet peak;
- generation (bench decode, infer --measure): `tfcalc infer --device-spec KEY` at the same batch, prompt and
  tokens: time to first token and the mean decode step; the bandwidth ceiling: datasheet × bandwidth_efficiency;
- memory --measure: tfcalc's estimate of the run's peak (and, training, of the bytes autograd saves);
- a training step on one GPU (bench ranks --nproc 1): the plan's compute of one micro-batch, forward and
  backward (`tfcalc plan --tp 1 --dp 1`), against forward + backward timed on the rank;
- device memory: the driver's total (tfcalc.devices.driver_bytes) and the CUDA context's share against what
  torch reports (a child process, so nothing else of this one is counted);
- plan --measure over NCCL: model-state bytes, collective bytes and the peak against the plan; the layouts of
  issue 20 (ZeRO-1/2, EP, pipeline schedules, HSDP) and infer --tp --measure: benchmarks/gpu_report_ranks.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any, Optional

import tfcalc
from tfcalc import devices
from tfcalc.config import ModelConfig, replace
from tfcalc.presets import load


@dataclasses.dataclass(frozen=True)
class Sizes:
    """What each step runs: full sizes on a GPU (the whole report within 10 minutes on one H100), tiny ones
    with --quick (a CPU test runs the script end to end in seconds)."""

    bench_model: ModelConfig
    bench_blocks: Optional[int]  # build this many blocks and extrapolate (bench --n-layer)
    bench_seq: int
    bench_batch: int
    min_time: float
    repeat: int
    warmup: Optional[int]
    matmul_size: Optional[int]
    decode_model: ModelConfig
    decode_seq: int
    decode_steps: int
    copy_bytes: Optional[int]
    infer_batches: tuple[int, ...]
    memory_forward: tuple[ModelConfig, int, int]  # model, batch, seq
    memory_training: tuple[ModelConfig, int, int]
    train_model: ModelConfig
    train_seq: int
    plan_model: ModelConfig
    plan_seq: int
    moe_model: ModelConfig  # expert parallelism (benchmarks/gpu_report_ranks.py)
    latent_moe_model: ModelConfig  # ZeRO-3 on grouped experts (and latent attention at full size)


def full_sizes() -> Sizes:
    llama, gpt2 = load("llama2-7b"), load("gpt2")
    return Sizes(bench_model=llama, bench_blocks=4, bench_seq=2048, bench_batch=1, min_time=2.0, repeat=5,
                 warmup=None, matmul_size=None, decode_model=llama, decode_seq=512, decode_steps=64, copy_bytes=None,
                 infer_batches=(1, 16), memory_forward=(llama, 1, 2048), memory_training=(gpt2, 8, 1024),
                 train_model=replace(llama, n_layer=4), train_seq=2048, plan_model=gpt2, plan_seq=512,
                 moe_model=load("mixtral-8x7b"), latent_moe_model=load("deepseek-v3"))


def quick_sizes() -> Sizes:
    tiny = replace(load("gpt2"), n_layer=2, d_model=64, n_head=4, vocab_size=256, max_seq_len=64)
    moe = replace(tiny, n_expert=3, n_expert_active=2, gated_ffn=True, activation="silu")  # 3: uneven over 2
    return Sizes(bench_model=tiny, bench_blocks=1, bench_seq=32, bench_batch=2, min_time=0.0, repeat=2, warmup=1,
                 matmul_size=64, decode_model=tiny, decode_seq=16, decode_steps=4, copy_bytes=1 << 20,
                 infer_batches=(1,), memory_forward=(tiny, 2, 32), memory_training=(tiny, 2, 32),
                 train_model=tiny, train_seq=32, plan_model=tiny, plan_seq=32,
                 moe_model=replace(moe, n_expert=4), latent_moe_model=moe)


def compare(quantity: str, unit: str, predicted: Optional[float], measured: Optional[float], how: str) -> dict:
    ratio = predicted / measured if predicted is not None and measured else None
    return {"quantity": quantity, "unit": unit, "predicted": predicted, "measured": measured, "ratio": ratio,
            "how": how}


NO_ENTRY = "no prediction: the device is not in tfcalc's device table (--device-spec names one)"


# ---------- bench: forward passes, fp32 and bf16 ----------


def forward_seconds(cfg: ModelConfig, batch: int, seq: int, dtype: str, spec: devices.DeviceSpec) -> float:
    """The performance model's forward pass at full depth: every block's forward and the LM head's forward
    GEMM over all batch × seq positions (see the module docstring)."""
    from tfcalc.count.perf import gemm
    from tfcalc.count.perf.hardware import perf_spec
    from tfcalc.count.training.micro_batch_time import micro_batch_time
    from tfcalc.count.training.shard import total_blocks
    from tfcalc.workload import Layout

    perf, peak = perf_spec(spec.key), spec.peak(dtype)
    layout = Layout(seq=seq, global_batch=batch, micro_batch=batch, dtype=dtype)
    t = micro_batch_time(cfg, layout, peak, spec.bandwidth_bytes_per_s * perf.bandwidth_efficiency, perf)
    head = gemm.seconds(batch * seq, cfg.vocab_size, cfg.d_model, peak, perf.sm_count, perf.matmul_ceiling) \
        if cfg.lm_head else 0.0
    return total_blocks(cfg) * t.block_forward_s + head


def matmul_ceiling(n: int, dtype: str, spec: devices.DeviceSpec) -> float:
    from tfcalc.count.perf import gemm
    from tfcalc.count.perf.hardware import perf_spec

    perf = perf_spec(spec.key)
    return spec.peak(dtype) * gemm.efficiency(n, n, n, perf.sm_count, perf.matmul_ceiling)


def bench_step(sizes: Sizes, device: str, dtype: str, spec: Optional[devices.DeviceSpec]) -> dict:
    s = sizes
    j = tfcalc.bench(s.bench_model, batch=s.bench_batch, seq=s.bench_seq, device=device, dtype=dtype,
                     min_time=s.min_time, repeat=s.repeat, warmup=s.warmup, n_layer=s.bench_blocks,
                     matmul_size=s.matmul_size).to_json()
    n = s.matmul_size or (2048 if device == "cpu" else 8192)  # bench's default (tfcalc.report.bench)
    rated = spec is not None and spec.peak(dtype) is not None and not j["tf32"]
    pred_s = forward_seconds(s.bench_model, s.bench_batch, s.bench_seq, dtype, spec) if rated else None
    pred_mfu = j["forward_flops"] / (pred_s * spec.peak(dtype)) if rated else None
    how = (f"performance model on {spec.key}, {dtype} peak" if rated else NO_ENTRY)
    return {"comparisons": [
        compare("forward pass, full depth", "s", pred_s, j["median_s"],
                how + (f"; measured on {j['n_layer_run']} blocks, extrapolated" if j["extrapolated"] else "")),
        compare("MFU of the forward pass", "fraction", pred_mfu, j["mfu"], how),
        compare(f"matmul ceiling ({n}² GEMM)", "FLOP/s", matmul_ceiling(n, dtype, spec) if rated else None,
                j["matmul_ceiling_flops_per_s"], "GEMM shape model × datasheet peak" if rated else NO_ENTRY),
        compare("peak memory of the forward pass", "bytes", j["estimated_memory_bytes"], j["peak_memory_bytes"],
                "tfcalc's fit estimate (weights + working set + the ceiling's buffers)"),
    ], "measured": j}


# ---------- generation: bench decode and infer --measure ----------


def _datasheet_infer(cfg: ModelConfig, batch: int, seq: int, gen: int, dtype: str,
                     spec: Optional[devices.DeviceSpec]) -> Optional[dict]:
    if spec is None:
        return None
    return tfcalc.infer(cfg, batch=batch, seq=seq, gen=gen, dtype=dtype, device_spec=spec.key).to_json()


def _generation(j: dict, pred: Optional[dict], spec: Optional[devices.DeviceSpec]) -> list[dict]:
    how = f"`tfcalc infer --device-spec {spec.key}` (performance model)" if pred else NO_ENTRY
    measured_ceilings = "roofline at the ceilings measured in the same run"
    out = [compare("time to first token (prefill)", "s", pred and pred["prefill_s"], j["prefill_s"], how),
           compare("decode step", "s/token", pred and pred["decode_s_per_token"], j["decode_s_per_token"], how),
           compare("decode step", "s/token", j["predicted"]["decode_s_per_token"], j["decode_s_per_token"],
                   measured_ceilings),
           compare("time to first token (prefill)", "s", j["predicted"]["prefill_s"], j["prefill_s"],
                   measured_ceilings)]
    if spec is not None:
        from tfcalc.count.perf.hardware import perf_spec

        bw = spec.bandwidth_bytes_per_s
        out.append(compare("bandwidth ceiling", "bytes/s", bw * perf_spec(spec.key).bandwidth_efficiency,
                           j["bandwidth_ceiling_bytes_per_s"], "datasheet × bandwidth_efficiency"))
        achieved = pred and pred["bytes_per_token"] * pred["batch"] / pred["decode_s_per_token"]
        out.append(compare("MBU (datasheet bandwidth)", "fraction", achieved and achieved / bw, j["mbu_datasheet"],
                           how))
    return out


def decode_step(sizes: Sizes, device: str, spec: Optional[devices.DeviceSpec]) -> dict:
    s = sizes
    j = tfcalc.bench(s.decode_model, batch=1, seq=s.decode_seq, device=device, dtype="bf16" if device != "cpu"
                     else "fp32", decode=s.decode_steps, matmul_size=s.matmul_size, copy_bytes=s.copy_bytes,
                     warmup=s.warmup, repeat=s.repeat).to_json()
    pred = _datasheet_infer(s.decode_model, 1, s.decode_seq, s.decode_steps + 1, j["dtype"], spec)
    return {"comparisons": _generation(j, pred, spec) + _beside_hf(s, device, j), "measured": j}


def _beside_hf(s: Sizes, device: str, j: dict) -> list[dict]:
    """Hugging Face generate with its static cache on the same shape, dtype and device (benchmarks/hf_decode.py),
    in the "predicted" column beside tfcalc's decode step (ratio = HF ÷ tfcalc: above 1, tfcalc is faster)."""
    import torch
    from hf_decode import hf_decode_s_per_token

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(j["dtype"], torch.float32)
    hf = hf_decode_s_per_token(s.decode_model, device, dtype, s.decode_seq, s.decode_steps,
                               repeat=max(2, s.repeat // 2))
    how = (f"Hugging Face generate, static cache (its column: HF's time; tfcalc's steps ran as {j.get('mode')!r})"
           if hf is not None else "no Hugging Face model of this shape is built (benchmarks/hf_decode.py)")
    return [compare("decode step beside HF generate (static cache)", "s/token", hf, j["decode_s_per_token"], how)]


def infer_step(sizes: Sizes, device: str, batch: int, spec: Optional[devices.DeviceSpec]) -> dict:
    s = sizes
    dtype = "bf16" if device != "cpu" else "fp32"
    j = tfcalc.infer(s.decode_model, batch=batch, seq=s.decode_seq, gen=s.decode_steps, dtype=dtype, measure=True,
                     device=device, warmup=s.warmup or 3, repeat=s.repeat, copy_bytes=s.copy_bytes).to_json()
    pred = _datasheet_infer(s.decode_model, batch, s.decode_seq, s.decode_steps, dtype, spec)
    return {"comparisons": _generation(j, pred, spec), "measured": j}


# ---------- memory --measure ----------


def memory_step(sizes: Sizes, device: str, training: bool) -> dict:
    cfg, batch, seq = sizes.memory_training if training else sizes.memory_forward
    dtype = "bf16" if device != "cpu" else "fp32"
    j = tfcalc.memory(cfg, batch=batch, seq=seq, dtype=dtype, training=training, measure=True,
                      device=device).to_json()
    out = [compare("peak memory", "bytes", j["estimated_peak_bytes"], j["measured_peak_bytes"],
                   f"tfcalc's estimate; measured: {j['measure_method']}")]
    if training:
        out.append(compare("bytes autograd saves for backward", "bytes", j["activations"]["stored_bytes"],
                           j["measured_saved_activation_bytes"], "tfcalc.count.model.activations (exact on the CPU)"))
    return {"comparisons": out, "measured": {k: v for k, v in j.items() if k != "activations"}}


# ---------- a training step on one GPU ----------


def train_step(sizes: Sizes, device: str, spec: Optional[devices.DeviceSpec]) -> dict:
    s = sizes
    dtype = "bf16" if device != "cpu" else "fp32"
    j = tfcalc.bench(s.train_model, batch=1, seq=s.train_seq, device=device.split(":")[0], dtype=dtype, nproc=1,
                     warmup=s.warmup or 3, repeat=max(s.repeat, 3)).to_json()
    pred = None
    if spec is not None and spec.peak(dtype) is not None:
        p = tfcalc.plan(s.train_model, tp=1, pp=1, dp=1, seq=s.train_seq, micro_batch=1, global_batch=1,
                        dtype=dtype, device_spec=spec.key).to_json()
        pred = p["step"]["compute_s"]
    how = (f"`tfcalc plan --tp 1 --dp 1 --device-spec {spec.key}`: compute of one micro-batch" if pred else NO_ENTRY)
    return {"comparisons": [compare("forward + backward, one micro-batch", "s", pred, j["median_s"],
                                    how + "; measured: forward, backward and zero_grad, no optimizer step")],
            "measured": j}


# ---------- device memory (CUDA) ----------

_CONTEXT_PROBE = """
import json, torch
free0, total = torch.cuda.mem_get_info(0)
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16); (a @ a).sum().item()
free1, _ = torch.cuda.mem_get_info(0)
print(json.dumps({"total": total, "used_after_init": total - free0, "used_after_matmul": total - free1,
                  "reserved": torch.cuda.memory_reserved(0)}))
"""


def device_memory_step(spec: Optional[devices.DeviceSpec]) -> dict:
    """In a fresh process: the driver's total, and what the CUDA context and cuBLAS take beyond the tensors
    (used after a matmul, less what the caching allocator reserved), against tfcalc's figures."""
    import torch

    before = torch.cuda.mem_get_info(0)  # this process's context exists already: others' use is in both
    probe = json.loads(subprocess.run([sys.executable, "-c", _CONTEXT_PROBE], capture_output=True, text=True,
                                      check=True, timeout=120).stdout)
    others = before[1] - before[0]
    context = probe["used_after_matmul"] - probe["reserved"] - others
    return {"comparisons": [
        compare("device memory the driver reports", "bytes", devices.driver_bytes(spec) if spec else None,
                probe["total"], "tfcalc.devices.driver_bytes (0.9899 of the datasheet's GB read as GiB)"
                if spec else NO_ENTRY),
        compare("CUDA context and cuBLAS workspace", "bytes", devices.CUDA_CONTEXT_BYTES, context,
                "tfcalc.devices.CUDA_CONTEXT_BYTES; measured: a fresh process's use after one matmul, less its "
                "allocator's reserve and this process's and others' use"),
    ], "measured": {**probe, "others_bytes": others}}


def summary(result: dict[str, Any]) -> str:
    """One line per step for the terminal."""
    ratios = [c["ratio"] for c in result.get("comparisons", []) if c["ratio"] is not None]
    shown = ", ".join(f"{r:.3g}" for r in ratios[:6])
    return f"{result['name']}: {result['status']}" + (f" (ratios {shown})" if shown else "") + \
        (f" -- {result['reason']}" if result.get("reason") else "")
