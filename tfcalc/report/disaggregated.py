"""`tfcalc infer --rate R --mean-input I --mean-output O --disaggregate P:D`: P prefill and D decode instances of the
layout the other options give (tfcalc.count.serving.disaggregated), the JSON's ``disaggregated`` object (None without
the flag). The ``continuous`` object beside it stays the colocated server: one instance of the same layout at R."""

from __future__ import annotations

from typing import Any, Optional

from tfcalc import devices
from tfcalc.count.serving import continuous, disaggregated as dis
from tfcalc.errors import InputError

SCHEDULER = ("disaggregated: prefill instances run prompts only, each whole (an M/D/1 queue per server; DistServe, "
             "Zhong et al. 2024), the KV cache sent layer by layer to a decode instance (Splitwise, Mooncake), decode "
             "instances run decode steps only; Poisson arrivals")


def check(o) -> Optional[tuple[int, int]]:
    """--disaggregate P:D, checked against the other options (one line each); (P, D), or None without it."""
    if o.disaggregate is None:
        return None
    p_d = dis.parse(o.disaggregate)
    if o.rate is None:
        raise InputError("--disaggregate prices a server under a Poisson stream: give --rate R with --mean-input and "
                         "--mean-output" + (" (--concurrency's closed loop is not modelled disaggregated)"
                                            if o.concurrency is not None else ""))
    if o.measure:
        raise InputError("--disaggregate with --measure: tfcalc's own runtime serves prefill and decode on one device; "
                         "the disaggregated server is a prediction only")
    for name, value in (("--prefill-chunk", o.prefill_chunk), ("--context-chunking", o.context_chunking),
                        ("--cached-prefix", o.cached_prefix), ("--max-batch", o.max_batch)):
        if value is not None:
            raise InputError(f"{name} with --disaggregate is not modelled: the prefill instances run each prompt "
                             "whole, "
                             f"the decode instances hold every sequence the KV cache fits; drop {name}")
    return p_d


def link(spec: Optional[devices.DeviceSpec], c, gpus: int, p_d: tuple[int, int]) -> dis.Link:
    """The KV cache's path (count.serving.disaggregated, step 2): the node's link when all instances fit one node,
    else the network; the performance model's α and efficiency for it."""
    if spec is None or c.perf is None:
        raise InputError("--disaggregate prices the KV transfer over a listed device's links: give --device-spec")
    total = (p_d[0] + p_d[1]) * gpus
    if total <= spec.gpus_per_node and spec.intra_node_bytes_per_s and spec.gpus_per_node > 1:
        kind = devices.intra_link(spec)
        return dis.Link(kind, spec.intra_node_bytes_per_s, c.perf.link_latency_s[kind], c.perf.link_efficiency[kind],
                        devices.intra_link_name(spec))
    if not spec.inter_node_bytes_per_s:
        raise InputError(f"--disaggregate {p_d[0]}:{p_d[1]} needs {total:,} GPUs, past one node of {spec.name} "
                         f"({spec.gpus_per_node}), which names no network between nodes (inter_node_bytes_per_s)")
    return dis.Link("network", spec.inter_node_bytes_per_s, c.perf.link_latency_s["network"],
                    c.perf.link_efficiency["network"])


def solve(o, cfg, fmt, kv: str, c, spec, memory: Optional[int], tp=None, lay=None) -> Optional[dis.Disaggregated]:
    """The disaggregated server of the options: one GPU or --tp T per instance (``tp``), or --ep's layout (``lay``:
    each attention-DP group a server)."""
    p_d = check(o)
    if p_d is None:
        return None
    t = continuous.Traffic(o.rate, o.mean_input, o.mean_output)
    if lay is not None:
        from tfcalc.count.serving import ep_continuous

        e, groups, gpus = ep_continuous.Engine(cfg, fmt, kv, c, t, memory, lay, None), lay.dp, lay.ep
    else:
        e, groups, gpus = continuous.Engine(cfg, fmt, kv, c, t, memory, tp, None), 1, o.tp
    return dis.solve(e, t, p_d[0], p_d[1], groups, link(spec, c, gpus, p_d))


def to_json(x: Optional[dis.Disaggregated]) -> Optional[dict[str, Any]]:
    if x is None:
        return None
    t, over = x.traffic, x.limit is not None
    return {"prefill_instances": x.prefill_instances, "decode_instances": x.decode_instances,
            "servers_per_instance": x.groups, "rate_per_s": t.rate, "mean_input": t.mean_input,
            "mean_output": t.mean_output, "scheduler": SCHEDULER,
            "prefill_s": x.prefill_s, "prefill_share": x.prefill_share, "prefill_wait_s": x.prefill_wait_s,
            "kv_transfer_bytes": x.kv_transfer_bytes, "kv_transfer_s": x.kv_transfer_s,
            "kv_transfer_exposed_s": x.kv_exposed_s, "kv_link": x.link.kind, "kv_link_name": x.link.name,
            "kv_link_bytes_per_s": x.link.bytes_per_s, "layers": x.layers,
            "decode_batch": x.concurrency, "decode_step_s": x.decode_step_s, "ttft_s": x.ttft_s,
            "itl_s": x.itl_s if t.mean_output > 1 else None, "e2e_s": x.e2e_s, "request_s": x.request_s,
            "output_tokens_per_s": None if over else t.rate * t.mean_output,
            "input_tokens_per_s": None if over else t.rate * t.mean_input,
            "kv_cache_bytes": x.kv_cache_bytes, "max_concurrency": x.max_concurrency,
            "prefill_max_rate_per_s": x.prefill_max_rate, "prompts_per_step_batched": x.prompts_per_step,
            "prefill_batched_s": x.prefill_batched_s, "prefill_batched_max_rate_per_s": x.prefill_batched_max_rate,
            "decode_max_rate_per_s": x.decode_max_rate,
            "max_rate_per_s": x.max_rate, "over_capacity": over, "limit": x.limit, "decode_limit": x.decode_limit}
