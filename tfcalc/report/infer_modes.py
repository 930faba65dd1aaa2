"""`tfcalc infer`'s serving modes of issue 20 beside the static estimate (tfcalc.report.infer): tensor-parallel
serving (--tp, tfcalc.count.serving_tp), speculative decoding (--draft, tfcalc.count.speculative): their
checks, the JSON objects ``tensor_parallel`` and ``speculative``, and the draft's round per batch.
Continuous batching (--rate) is tfcalc.report.continuous."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional

from tfcalc import devices
from tfcalc.count import serving, serving_tp, speculative
from tfcalc.count.roofline import Ceilings
from tfcalc.errors import InputError, shown
from tfcalc.report.model_ref import ModelRef
from tfcalc.workload import Workload

if TYPE_CHECKING:
    from tfcalc.report.infer import InferOptions, InferReport


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
    the rule: tfcalc.count.serving_tp.check_tp)."""
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


def check_draft(o: InferOptions) -> None:
    """--accept-rate and --draft-tokens belong to --draft; --draft needs --accept-rate; measured at batch 1."""
    if o.draft is None:
        for name, value in (("--accept-rate", o.accept_rate), ("--draft-tokens", o.draft_tokens)):
            if value is not None:
                raise InputError(f"{name} belongs to speculative decoding: give --draft MODEL too")
        return
    if o.accept_rate is None:
        raise InputError("--draft needs --accept-rate A, the probability that the target accepts a draft token "
                         "(a property of the two models and the text; tfcalc does not guess it)")
    if o.measure:  # run for real: tfcalc.report.speculative_measured
        from tfcalc.report.speculative_measured import check

        check(o)


def with_draft(model: ModelRef, o: InferOptions, report: "InferReport") -> "InferReport":
    """The speculative round per batch (tfcalc.count.speculative), the draft resolved like MODEL."""
    if o.draft is None:
        return report
    from tfcalc.report.model_ref import resolve

    draft = resolve(o.draft, [])
    k = speculative.DEFAULT_DRAFT_TOKENS if o.draft_tokens is None else o.draft_tokens
    tp = report.tp_link if report.tp > 1 else None
    rows = tuple(speculative.estimate(model.cfg, draft.cfg, Workload(batch=e.batch, seq=report.seq, gen=o.gen,
                                                                     src_seq=report.src_seq, dtype=report.fmt.dtype,
                                                                     kv_dtype=report.kv_dtype),
                                      report.fmt, report.ceilings, k, o.accept_rate, tp)
                 for e in report.estimates)
    return replace(report, draft=draft, speculative=rows)


def tp_json(self: "InferReport", est: serving.Estimate) -> Optional[dict[str, Any]]:
    """Tensor-parallel serving: the split and the step's all-reduces (tfcalc.count.serving_tp); None at T = 1.
    weights_bytes, kv_cache_bytes and fits are then one GPU's."""
    if self.tp == 1:
        return None
    cfg, t = self.model.cfg, self.tp_link
    over = (est.prefill_overhead, est.decode_overhead)
    return {"gpus": self.tp, "link": t.link, "link_bytes_per_s": t.link_bytes_per_s,
            "kv_heads_replicated": serving_tp.kv_replicated(cfg, self.tp),
            "kv_share_per_gpu": str(serving_tp.kv_share(cfg, self.tp)),
            "allreduces_per_decode_step": sum(n for n, _ in serving_tp.allreduce_calls(cfg, decode=True)),
            "allreduces_prefill": sum(n for n, _ in serving_tp.allreduce_calls(cfg, decode=False)),
            "prefill_comm_s": None if over[0] is None else over[0].comm_s,
            "decode_comm_s_per_step": None if over[1] is None else over[1].comm_s,
            "weights_bytes_all_gpus": serving.weights_bytes(cfg, self.fmt), "measured": self.tp_measured}

def speculative_json(self: "InferReport", i: int) -> Optional[dict[str, Any]]:
    """--draft: the round of tfcalc.count.speculative at this batch; None without a draft."""
    if self.speculative is None or self.draft is None:
        return None
    s, est = self.speculative[i], self.estimates[i]
    need = est.weight_bytes + est.kv_cache_bytes + s.draft_weights_bytes + s.draft_kv_cache_bytes
    memory = None if self.spec is None else devices.usable_bytes(self.spec, communicating=self.tp > 1)
    return {"draft": self.draft.cfg.name, "draft_label": self.draft.label, "draft_tokens": s.draft_tokens,
            "accept_rate": s.accept_rate, "expected_tokens_per_step": s.expected_tokens, "context": s.context,
            "target_step_s": s.target_step_s, "draft_step_s": s.draft_step_s, "verify_step_s": s.verify_step_s,
            "round_s": s.round_s, "decode_s_per_token": s.decode_s_per_token,
            "decode_tokens_per_s": 1 / s.decode_s_per_token,
            "decode_tokens_per_s_total": est.batch / s.decode_s_per_token, "speedup": s.speedup,
            "draft_weights_bytes": s.draft_weights_bytes, "draft_kv_cache_bytes": s.draft_kv_cache_bytes,
            "fits": None if memory is None else need <= memory,
            "formula": "tokens per target step (1 − A^(k+1)) / (1 − A) (Leviathan et al. 2023, eq. 1)",
            "measured": self.speculative_measured if i == 0 else None}


def _summed(calls) -> dict[str, dict[str, int]]:
    """{op: {calls, payload_bytes}} of measured calls (dicts) or predicted (op, calls, payload) triples."""
    out: dict[str, dict[str, int]] = {}
    for c in calls:
        op, n, payload = (c["op"], 1, c["payload_bytes"]) if isinstance(c, dict) else (c[0], c[1], c[1] * c[2])
        x = out.setdefault(op, {"calls": 0, "payload_bytes": 0})
        x["calls"] += n
        x["payload_bytes"] += payload
    return out


def measure_tp(model: ModelRef, o: "InferOptions", report: "InferReport") -> dict[str, Any]:
    """--measure --tp T: the collectives of the real model's forward under DTensor TP on T local ranks
    (tfcalc.measure.serving_tp; gloo on the CPU), a prefill of the report's seq and a one-token step at its
    first batch, in fp32 (what measured runs build), beside serving_tp's prediction in fp32."""
    import dataclasses

    from tfcalc.measure.serving_tp import measure

    batch, seq, cfg = report.estimates[0].batch, report.seq, model.cfg
    record = measure(dataclasses.asdict(cfg), o.tp, batch, seq, device=o.device)
    out: dict[str, Any] = {"backend": "gloo" if o.device == "cpu" else "nccl", "world_size": o.tp, "dtype": "fp32",
                           "batch": batch, "seq": seq}
    for phase, queries, decode in (("prefill", seq, False), ("decode", 1, True)):
        out[phase] = {"measured": _summed(record[phase]),
                      "predicted": _summed(serving_tp.step_collectives(cfg, batch, queries, 4, decode, tp=o.tp))}
    out["equal"] = all(out[p]["measured"] == out[p]["predicted"] for p in ("prefill", "decode"))
    return out
