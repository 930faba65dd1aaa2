"""The report of `tfcalc scan --decode`: decode tokens/s against the batch size at one context, on a
device's roofline, with the two roofs, the batch where decode turns compute-bound and the largest batch
that fits marked. Pure arithmetic (tfcalc.count.serving.roofline, tfcalc.count.serving.static)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tfcalc import devices
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.count.model.quant import WeightFormat, weights_bytes
from tfcalc.count.serving import roofline, static as serving
from tfcalc.report.display import Displayed
from tfcalc.report.infer import check_options, datasheet_ceilings, weight_formats
from tfcalc.report.infer_options import InferOptions
from tfcalc.report.model_ref import ModelRef
from tfcalc.workload import Workload, check_size, decoder_source


def scan_row(cfg, batch: int, context: int, fmt: WeightFormat, kv: str, c: roofline.Ceilings,
             memory: int, src_seq: Optional[int]) -> dict[str, Any]:
    step = roofline.decode_step(cfg, batch, context, fmt, kv, src_seq=src_seq)
    seconds = step.time_s(c)
    kv_bytes = kv_cache_bytes(cfg, Workload(batch=batch, seq=context, src_seq=src_seq, dtype=kv))
    return {
        "batch": batch,
        "step_s": seconds,
        "decode_tokens_per_s": 1 / seconds,
        "decode_tokens_per_s_total": batch / seconds,
        "memory_roof_tokens_per_s": batch * c.bytes_per_s / step.bytes,  # were every byte streamed at full speed
        "compute_roof_tokens_per_s": batch * c.flops_per_s / step.flops,  # were every FLOP at peak
        "flops_per_step": step.flops,
        "bytes_per_step": step.bytes,
        "bytes_per_token": step.bytes_per_token,
        "intensity": step.intensity,
        "bound": step.bound(c),
        "kv_cache_bytes": kv_bytes,
        "fits": weights_bytes(cfg, fmt) + kv_bytes <= memory,
    }


@dataclass(frozen=True, repr=False)
class DecodeScanReport(Displayed):
    model: ModelRef
    context: int
    fmt: WeightFormat
    kv_dtype: str
    spec: devices.DeviceSpec
    ceilings: roofline.Ceilings
    rows: tuple[dict[str, Any], ...]
    max_batch: int
    compute_bound_batch: Optional[int]
    weight_matmuls_compute_bound_batch: Optional[int]
    plot: Optional[str] = None

    def headline(self) -> str:
        return (f"{self.model.label} decoding at context {self.context:,} on {self.spec.key}: "
                f"{len(self.rows)} batch sizes, the largest that fits {self.max_batch:,}")

    def to_json(self) -> dict[str, Any]:
        c = self.ceilings
        return {
            "preset": self.model.cfg.name, "label": self.model.label, "context": self.context,
            "dtype": self.fmt.dtype, "weight_format": self.fmt.label, "kv_dtype": self.kv_dtype,
            "device_spec": self.spec.key, "device_name": self.spec.name, "memory_bytes": self.spec.memory_bytes,
            "ceilings": {"flops_per_s": c.flops_per_s, "bytes_per_s": c.bytes_per_s, "ridge_flops_per_byte": c.ridge,
                         "source": c.source},
            "weights_bytes": weights_bytes(self.model.cfg, self.fmt),
            "max_batch": self.max_batch, "compute_bound_batch": self.compute_bound_batch,
            "weight_matmuls_compute_bound_batch": self.weight_matmuls_compute_bound_batch,
            "rows": [dict(r) for r in self.rows], "plot": self.plot,
        }


def build_decode_scan(model: ModelRef, batches: list[int], context: Optional[int] = None, dtype: str = "bf16",
                      group_size: Optional[int] = None, kv_dtype: Optional[str] = None,
                      device_spec: Optional[str] = None, src_seq: Optional[int] = None) -> DecodeScanReport:
    cfg = model.cfg
    options = InferOptions(batches=tuple(batches), seq=context, gen=1, dtype=dtype, group_size=group_size,
                           kv_dtype=kv_dtype, src_seq=src_seq, device_spec=device_spec)
    check_options(model, options)
    fmt, kv = weight_formats(options)
    context = check_size("--seq", context if context is not None else cfg.max_seq_len)
    src = decoder_source(cfg, context, src_seq)
    spec, c = datasheet_ceilings(device_spec, fmt)
    rows = tuple(scan_row(cfg, b, context, fmt, kv, c, spec.memory_bytes, src) for b in sorted(set(batches)))
    w = Workload(seq=context, src_seq=src, dtype=fmt.dtype, kv_dtype=kv)
    return DecodeScanReport(
        model, context, fmt, kv, spec, c, rows,
        serving.max_batch(cfg, w, fmt, spec.memory_bytes),
        serving.compute_bound_batch(cfg, w, fmt, c),
        serving.weight_matmuls_compute_bound_batch(cfg, w, fmt, c),
    )
