"""`tfcalc infer --tp T`: tensor-parallel serving beside the static estimate (tfcalc.report.infer) -- the
check of --tp, the node's link the prediction uses (tfcalc.count.serving.serving_tp), the memory the runtime keeps,
and with --measure the collectives counted on T local ranks (tfcalc.measure.serving_tp). The JSON object
``tensor_parallel`` is tfcalc.report.infer_report's; speculative decoding (--draft) is checked in
tfcalc.report.infer, continuous batching (--rate) is tfcalc.report.continuous."""

from __future__ import annotations

from typing import Any, Optional

from tfcalc import devices
from tfcalc.count.serving import serving_tp
from tfcalc.count.serving.roofline import Ceilings
from tfcalc.errors import InputError, shown
from tfcalc.report.infer_options import InferOptions
from tfcalc.report.model_ref import ModelRef


def reserved_bytes(spec: devices.DeviceSpec, tp: int) -> dict[str, int]:
    """What the runtime keeps of the driver's memory, named: the CUDA context, and NCCL's buffers when the
    GPUs communicate (tfcalc.devices)."""
    out = {"cuda_context": devices.CUDA_CONTEXT_BYTES}
    if tp > 1:
        out["comm_buffers"] = devices.COMM_BUFFER_BYTES
    return out


def tensor_parallel(spec: Optional[devices.DeviceSpec], c: Ceilings, tp: int) -> serving_tp.TensorParallel:
    """The node's link for --tp: its kind, per-GPU rate, and the performance model's α and efficiency."""
    if tp == 1 or spec is None or c.perf is None:
        return serving_tp.TensorParallel(tp, "none", 0.0, 0.0, 1.0)
    link = devices.intra_link(spec)
    return serving_tp.TensorParallel(tp, link, spec.intra_node_bytes_per_s, c.perf.link_latency_s[link],
                                     c.perf.link_efficiency[link])


def check_tp(model: ModelRef, o: InferOptions, spec: Optional[devices.DeviceSpec]) -> None:
    """--tp: a positive integer, on a listed device whose node links its GPUs, within one node (the rest of
    the rule: tfcalc.count.serving.serving_tp.check_tp)."""
    if isinstance(o.tp, bool) or not isinstance(o.tp, int) or o.tp < 1:
        raise InputError(f"--tp must be a positive integer; got {shown(o.tp)}")
    if o.tp == 1:
        return
    if o.measure and (o.draft is not None or o.rate is not None):
        raise InputError("--measure --tp measures tensor parallelism's collectives alone: drop --draft and --rate")
    if spec is None or not spec.intra_node_bytes_per_s or spec.gpus_per_node < 2:
        raise InputError(f"--tp {o.tp}: {spec.name if spec else 'this device'} has no GPU-to-GPU link in tfcalc's "
                         "table (one GPU per node)")
    serving_tp.check_tp(model.cfg, o.tp, spec.gpus_per_node)


def _summed(calls) -> dict[str, dict[str, int]]:
    """{op: {calls, payload_bytes}} of measured calls (dicts) or predicted (op, calls, payload) triples."""
    out: dict[str, dict[str, int]] = {}
    for c in calls:
        op, n, payload = (c["op"], 1, c["payload_bytes"]) if isinstance(c, dict) else (c[0], c[1], c[1] * c[2])
        x = out.setdefault(op, {"calls": 0, "payload_bytes": 0})
        x["calls"] += n
        x["payload_bytes"] += payload
    return out


def measure_tp(model: ModelRef, o: InferOptions, batch: int, seq: int) -> dict[str, Any]:
    """--measure --tp T: the collectives of the real model's forward under DTensor TP on T local ranks
    (tfcalc.measure.serving_tp; gloo on the CPU), a prefill of the report's seq and a one-token step at its
    first batch, in fp32 (what measured runs build), beside serving_tp's prediction in fp32."""
    import dataclasses

    from tfcalc.measure.serving_tp import measure

    cfg = model.cfg
    record = measure(dataclasses.asdict(cfg), o.tp, batch, seq, device=o.device)
    out: dict[str, Any] = {"backend": "gloo" if o.device == "cpu" else "nccl", "world_size": o.tp, "dtype": "fp32",
                           "batch": batch, "seq": seq}
    for phase, queries, decode in (("prefill", seq, False), ("decode", 1, True)):
        out[phase] = {"measured": _summed(record[phase]),
                      "predicted": _summed(serving_tp.step_collectives(cfg, batch, queries, 4, decode, tp=o.tp))}
    out["equal"] = all(out[p]["measured"] == out[p]["predicted"] for p in ("prefill", "decode"))
    return out
