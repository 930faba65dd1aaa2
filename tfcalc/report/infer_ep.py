"""`tfcalc infer --ep E [--tp T] [--attention-dp D] [--redundant-experts R]`: expert-parallel serving of a mixture
(tfcalc.count.serving.expert_parallel) -- the layout's check, the node's links the prediction uses, the estimate per
batch on one GPU, and the JSON object ``expert_parallel`` of tfcalc.report.infer_report. With --measure (E ranks of
one node, attention DP, on this machine's CPUs): the prediction stays the listed device's, and the real model's
expert-parallel one-token steps on E gloo ranks (tfcalc.measure.serving_ep) are set beside it -- per-rank parameter
bytes, the all-to-all's bytes off each rank and the experts hit -- with the prediction of that run (fp32). --rate R
or --concurrency C: continuous batching over the attention-DP groups (tfcalc.count.serving.ep_continuous); --draft is
refused beside --ep, and --overlap ep or --measure beside --rate/--concurrency (one line each)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from tfcalc import devices
from tfcalc.count.perf import expert_imbalance
from tfcalc.count.serving import expert_parallel as ep
from tfcalc.count.serving.roofline import Ceilings
from tfcalc.errors import InputError, shown
from tfcalc.report.infer_options import InferOptions
from tfcalc.report.model_ref import ModelRef
from tfcalc.workload import Workload


def active(o: InferOptions) -> bool:
    """Whether the options ask for expert parallelism (--ep above 1, or --attention-dp / --redundant-experts)."""
    return (o.ep != 1 or o.attention_dp is not None or bool(o.redundant_experts) or o.ep_overlap
            or o.expert_imbalance is not None or o.ep_comm != "auto" or o.adp_balance)


def layout(model: ModelRef, o: InferOptions, spec: Optional[devices.DeviceSpec], c: Ceilings) -> ep.ExpertLayout:
    """The layout and its links (count.perf.hardware's α and efficiency per link kind), checked."""
    if isinstance(o.ep, bool) or not isinstance(o.ep, int) or o.ep < 1:
        raise InputError(f"--ep must be a positive integer; got {shown(o.ep)}")
    if o.draft is not None:
        raise InputError("--draft with --ep: speculative decoding under expert parallelism is not modelled; drop "
                         "--draft (or --ep)")
    load = "--rate" if o.rate is not None else "--concurrency" if o.concurrency is not None else None
    if load and o.ep_overlap:
        raise InputError(f"{load} with --overlap ep: two half batches under a stream of requests are not modelled; "
                         f"drop --overlap (or {load})")
    if load and o.measure:
        raise InputError(f"{load} with --ep --measure: the measured expert-parallel run is of one-token steps; drop "
                         f"--measure (or {load})")
    if o.ep == 1:
        raise InputError("--attention-dp, --redundant-experts, --overlap ep, --expert-imbalance, --ep-comm and "
                         "--adp-balance lay out expert parallelism: give --ep E above 1")
    if spec is None or c.perf is None:
        raise InputError("--ep predicts for a listed device: give --device-spec")
    if (spec.gpus_per_node < 2 or not spec.intra_node_bytes_per_s) and o.ep > 1:
        raise InputError(f"--ep {o.ep}: {spec.name} has no GPU-to-GPU link in tfcalc's table (one GPU per node)")
    dp = ep.check_layout(model.cfg, o.ep, o.tp, o.attention_dp, o.redundant_experts, spec.gpus_per_node)
    check_groups(o, dp)
    if o.ep > spec.gpus_per_node and not spec.inter_node_bytes_per_s:
        raise InputError(f"--ep {o.ep} spans nodes of {spec.gpus_per_node} GPUs, but {spec.name} names no network "
                         "between nodes (inter_node_bytes_per_s)")
    if o.measure and (o.tp > 1 or o.ep > spec.gpus_per_node or o.redundant_experts or o.device != "cpu"):
        raise InputError("--measure --ep runs the experts on E gloo ranks of this machine's CPUs, attention data-"
                         "parallel: give --ep within one node, without --tp, --redundant-experts or --device cuda")
    link, perf = devices.intra_link(spec), c.perf
    return ep.ExpertLayout(o.ep, o.tp, dp, o.redundant_experts, spec.gpus_per_node, link, spec.intra_node_bytes_per_s,
                           perf.link_latency_s[link], perf.link_efficiency[link], spec.inter_node_bytes_per_s or 0.0,
                           perf.link_latency_s["network"], perf.link_efficiency["network"], o.ep_overlap,
                           expert_imbalance.parse(o.expert_imbalance),
                           ep.comm_method(o.ep_comm, o.ep, dp, spec.gpus_per_node))


def check_groups(o: InferOptions, dp: int) -> None:
    """--ep-comm allgather and --adp-balance on act between attention-DP groups: refused in one line where there is
    one group (D = 1: TP attention, every GPU the same tokens), and --adp-balance where no step is paced
    (tfcalc.count.serving.ep_continuous: the stall rides the budgeted steps of --rate/--concurrency)."""
    from tfcalc.report.continuous import loaded, prefill_chunk

    if o.ep_comm == "allgather" and dp == 1:
        raise InputError("--ep-comm allgather gathers each attention-DP group's own tokens; with one group (--tp "
                         "equal to --ep) every GPU holds the same tokens: give --attention-dp D above 1, or --ep-comm "
                         "alltoall or auto")
    if not o.adp_balance:
        return
    if dp == 1:
        raise InputError("--adp-balance aligns the attention-DP groups' prompts; with one group (--tp equal to --ep) "
                         "there is none to wait for: give --attention-dp D above 1, or drop --adp-balance")
    if not loaded(o):
        raise InputError("--adp-balance paces the attention-DP groups' prompts under load: give --rate R or "
                         "--concurrency C with --mean-input and --mean-output")
    if prefill_chunk(o) is None:
        raise InputError("--adp-balance with --prefill-chunk 0: the groups' pace is priced on steps that carry prompts "
                         "within the token budget, not on prompts prefilled alone; drop one")


def steady_state(model: ModelRef, o: InferOptions, fmt, kv: str, c: Ceilings, memory: Optional[int],
                 lay: ep.ExpertLayout):
    """--rate R or --concurrency C under EP: each attention-DP group a server of R/D requests/s or C/D users
    (tfcalc.count.serving.ep_continuous), the whole server's figures D times a group's."""
    from tfcalc.count.serving import closed_loop, continuous, ep_continuous
    from tfcalc.report.continuous import prefill_chunk, split

    cfg, d = model.cfg, lay.dp
    t = continuous.Traffic(o.rate / d if o.rate is not None else 1.0, o.mean_input, o.mean_output,
                           o.cached_prefix or 0)
    budget = prefill_chunk(o)
    e = ep_continuous.Engine(cfg, fmt, kv, c, t, memory, lay, budget, split(o), o.adp_balance)
    if o.concurrency is not None:
        group = continuous.with_prefix(closed_loop.solve(e, o.concurrency / d, o.mean_input, o.mean_output), e,
                                       t.cached_prefix)
    else:
        group = continuous.steady_state(cfg, fmt, kv, c, t, memory, None, budget, engine=e, max_batch=o.max_batch)
    pace = None if e.chunked is None or d == 1 else e.pace(group.concurrency)  # the stall rides the chunked path
    return replace(ep_continuous.whole(group, d), whole=e.chunked is not None and not e.chunked.split,
                   engine=o.engine_settings, pace=pace)


def estimates(model: ModelRef, o: InferOptions, w: Workload, fmt, c: Ceilings, memory: Optional[int],
              lay: ep.ExpertLayout) -> dict[str, Any]:
    """The report's fields under EP: estimates (one GPU's), terms, read_estimates (the same: the EP runtime is not
    tfcalc's), max_batch, the compute-bound batches."""
    cfg = model.cfg
    pairs = [ep.estimate(cfg, replace(w, batch=b), fmt, c, memory, lay) for b in o.batches]
    return {"estimates": tuple(e for e, _ in pairs), "ep_terms": tuple(t for _, t in pairs),
            "max_batch": None if memory is None else ep.max_batch(cfg, w, fmt, memory, lay),
            "compute_bound_batch": ep.compute_bound_batch(cfg, w, fmt, c, lay),
            "weight_matmuls_compute_bound_batch": ep.compute_bound_batch(cfg, w, fmt, c, lay, weights_only=True)}


def _a2a(p: Optional[ep.Phase]) -> Optional[dict[str, Any]]:
    """A phase's all-to-all (step 4) and how much of it the step shows (step 6)."""
    if p is None:
        return None
    a = p.a2a
    return {"route": a.how, "compute_s": p.compute_s, "step_s": p.step_s, "exposed_s": p.exposed_a2a_s,
            "tokens_per_gpu": a.tokens, "moe_layers": a.layers, "dispatch_bytes_per_token_per_layer":
            a.dispatch_bytes_per_token, "combine_bytes_per_token_per_layer": a.combine_bytes_per_token,
            "network_bytes": round(a.network_bytes), "nvlink_bytes": round(a.intra_bytes), "seconds": a.seconds}


def to_json(lay: ep.ExpertLayout, cfg, est, t: ep.Terms) -> dict[str, Any]:
    """The layout and each term of the module docstring of count.serving.expert_parallel, one GPU's."""
    moe = ep.moe_of(cfg)
    per_step = None if est.decode_s_per_token is None else est.batch / est.decode_s_per_token
    decode = est.first_decode_step
    return {
        "gpus": lay.ep, "ep": lay.ep, "attention_tp": lay.tp, "attention_dp": lay.dp, "nodes": lay.nodes,
        "gpus_per_node": lay.gpus_per_node, "n_expert": moe.n_expert, "overlap": "two-batch" if lay.overlap else None,
        "top_k": moe.top_k, "redundant_experts": lay.redundant, "experts_per_gpu": t.experts_per_gpu,
        "sequences_per_attention_group": t.group_batch,
        "weights_bytes_per_gpu": t.weights["total"], "routed_experts_bytes_per_gpu": t.weights["routed_experts"],
        "attention_dense_shared_bytes_per_gpu": t.weights["rest"], "kv_cache_bytes_per_gpu": est.kv_cache_bytes,
        "decode_experts_hit_per_gpu_per_layer": ep.hit_per_gpu(cfg, lay, est.batch),
        "decode_weights_read_bytes_per_gpu": None if decode is None else decode.weight_bytes,
        "decode_kv_read_bytes_per_gpu": None if decode is None else decode.kv_bytes,
        "ep_comm": {"method": lay.comm, "source": "TensorRT-LLM v1.0's CUTLASS MoE under attention DP: allgather + "
                    "reduce-scatter unless a multi-node NVLink domain and EP > top-k (modeling_qwen3_moe.py, "
                    "should_enable_alltoall); count.serving.ep_all_to_all.comm_method"},
        "prefill_all_to_all": _a2a(t.prefill), "decode_all_to_all": _a2a(t.decode),
        "a2a_s_per_decode_step": None if t.decode is None else t.decode.a2a.seconds,
        "attention_tp_comm_s_per_decode_step": None if t.decode is None else t.decode.tp_comm_s,
        "prefill_attention_tp_comm_s": t.prefill.tp_comm_s,
        "decode_tokens_per_s_all_gpus": per_step,
        "decode_tokens_per_s_per_gpu": None if per_step is None else per_step / lay.ep,
        "decode_tokens_per_s_per_node": None if per_step is None else per_step / lay.ep * min(lay.ep,
                                                                                              lay.gpus_per_node),
        "expert_imbalance": {**expert_imbalance.describe(lay.imbalance, ep.IMBALANCE_DEFAULT),
                             "prefill_factor": t.imbalance["prefill"], "decode_factor": t.imbalance["decode"]},
        "assumption": "the routed pairs of the fullest GPU: the mean's (n + R slots) times expert_imbalance's factor "
                      "(count.perf.expert_imbalance); the all-to-all after the compute, or under --overlap ep beside "
                      "two half batches' compute",
    }


MEASURED_STEPS = 16  # one-token steps a measured run averages over (the routing varies from step to step)


def measure(model: ModelRef, lay: ep.ExpertLayout, batch: int) -> dict[str, Any]:
    """--measure --ep E: the real model's steps on E gloo ranks (fp32), each rank its own ⌈B/D⌉ sequences, beside
    count.serving.expert_parallel's figures for that run: parameter bytes (exact), all-to-all bytes off a rank
    and experts hit per layer and step (expectations under uniform routing: a random router comes close)."""
    import dataclasses

    from tfcalc.count.model.quant import plain
    from tfcalc.measure.launch import check_nproc
    from tfcalc.measure.serving_ep import measure as run

    cfg, b = model.cfg, ep.group_batch(batch, lay)
    lay = dataclasses.replace(lay, comm="alltoall")  # the gloo ranks exchange by all_to_all_single (serving_ep)
    check_nproc(lay.ep, "cpu")
    ranks = run(dataclasses.asdict(cfg), lay.ep, b, MEASURED_STEPS)
    w = ep.weights_per_gpu(cfg, plain("fp32"), lay)
    a2a = ep.all_to_all(cfg, lay, b, 4, fp8=False)
    per_step = sum(r["off_rank_bytes"] for r in ranks) / (lay.ep * MEASURED_STEPS)
    return {"backend": "gloo", "world_size": lay.ep, "dtype": "fp32", "sequences_per_rank": b,
            "steps": MEASURED_STEPS,
            "routed_experts_bytes_per_rank": {"measured": [r["routed_experts_bytes"] for r in ranks],
                                              "predicted": w["routed_experts"]},
            "rest_bytes_per_rank": {"measured": [r["rest_bytes"] for r in ranks], "predicted": w["rest"]},
            "a2a_bytes_per_rank_per_step": {"measured": per_step, "predicted": a2a.intra_bytes},
            "experts_hit_per_rank_per_layer": {"measured": sum(r["experts_hit_mean"] for r in ranks) / lay.ep,
                                               "predicted": ep.hit_per_gpu(cfg, lay, b * lay.ep)},
            "weights_equal": all(r["routed_experts_bytes"] == w["routed_experts"] and r["rest_bytes"] == w["rest"]
                                 for r in ranks)}
