"""`tfcalc infer` as a document: per batch, prefill and decode predicted (and measured), then what fits
and where decode turns compute-bound; --verbose adds the roofline of one step, matmul by matmul."""

from __future__ import annotations

from typing import Any

from tfcalc import units
from tfcalc.cli.render.disaggregated import disaggregated_table
from tfcalc.cli.render.doc import Column, Doc
from tfcalc.cli.render.infer_ep import ep_measured_note, ep_table, pace_note
from tfcalc.count.perf.hardware import constants_line, from_table
from tfcalc.report.infer_report import InferReport


def _title(r: InferReport, first: dict[str, Any]) -> str:
    where = first["device_name"] or first["device"]
    if r.ep_layout is not None:
        where = f"{r.gpus} × {where} (expert parallel; figures per GPU, tok/s total of all)"
    elif r.tp > 1:
        where = f"{r.tp} × {where} (tensor parallel; figures per GPU)"
    return (f"{r.model.label} on {where}: prompt {r.seq:,} + {r.options.gen:,} new tokens, weights "
            f"{r.weight_label}, KV cache {r.kv_dtype} ({r.ceilings.source})")


def _predicted_table(doc: Doc, r: InferReport, rows: list[dict[str, Any]]) -> None:
    t = doc.table(_title(r, rows[0]), Column("batch", "int"), Column("prefill (TTFT)", "seconds"),
                  Column("decode / token", "seconds"), Column("tok/s per seq", "tokens_rate"),
                  Column("tok/s total", "tokens_rate", priority=1), Column("bytes / token", "bytes", priority=2),
                  Column("KV cache", "bytes"), Column("fits"), Column("decode bound"),
                  Column("prefill bound", priority=3), name="serving")  # the verdict, fits, is never hidden
    for row in rows:
        p = row["predicted"]
        fits = "" if row["fits"] is None else "yes" if row["fits"] else "no"
        t.add(row["batch"], p["prefill_s"], p["decode_s_per_token"], p["decode_tokens_per_s"],
              p["decode_tokens_per_s_total"], p["bytes_per_token"], row["kv_cache_bytes"], fits, p["bound"],
              p["prefill_bound"])


def _prefix_note(doc: Doc, row: dict[str, Any]) -> None:
    """--cached-prefix: what the prefill computes and, under load, what the KV cache holds once."""
    x, asked = row["continuous"], row["cached_prefix"]
    if not asked:
        return
    hit = x["cached_tokens"] if x else row["cached_tokens"]
    prompt = x["mean_input"] if x else row["seq"]
    held = "" if not x else (f"; the KV cache holds the prefix once ({units.nbytes(x['prefix_kv_bytes'])}), each "
                             "sequence only the rest of its context")
    doc.note(f"Cached prefix: {asked:,} tokens asked, {hit:,} hit (whole blocks of 16): a prefill computes "
             f"{prompt - hit:,} of the {prompt:,} prompt tokens, attending to all of them{held}.")


def _short_note(doc: Doc, r: InferReport, rows: list[dict[str, Any]]) -> None:
    """The batches asked for that do not fit, in words, under the table: its fits column may be moved below it
    on a narrow terminal, and a verdict must not depend on the width."""
    short = [x["batch"] for x in rows if x["fits"] is False]
    if short:
        which = f"Batch {short[0]:,} does" if len(short) == 1 else f"Batches {', '.join(f'{b:,}' for b in short)} do"
        most = "" if not r.max_batch else f"; the largest that fits is {r.max_batch:,}"
        doc.note(f"{which} not fit: weights + KV cache past the {units.nbytes(rows[0]['memory_bytes'])} usable{most}.",
                 "warning")


def _speculative_table(doc: Doc, r: InferReport, rows: list[dict[str, Any]]) -> None:
    """--draft: the speculative round beside plain decoding (tfcalc.count.serving.speculative)."""
    first = rows[0]["speculative"]
    if first is None:
        return
    t = doc.table(f"Speculative decoding: draft {first['draft_label']}, k = {first['draft_tokens']}, accept rate "
                  f"{first['accept_rate']:g} ({first['expected_tokens_per_step']:.3g} tokens per target step)",
                  Column("batch", "int"), Column("draft step", "seconds", priority=1),
                  Column("verify step", "seconds", priority=1),
                  Column("decode / token", "seconds"), Column("tok/s per seq", "tokens_rate"),
                  Column("speedup", "ratio"), Column("tok/s total", "tokens_rate", priority=1),
                  Column("draft weights + KV", "bytes", priority=2), Column("fits"), name="speculative")
    for row in rows:
        x = row["speculative"]
        fits = "" if x["fits"] is None else "yes" if x["fits"] else "no"
        t.add(row["batch"], x["draft_step_s"], x["verify_step_s"], x["decode_s_per_token"], x["decode_tokens_per_s"],
              x["speedup"], x["decode_tokens_per_s_total"], x["draft_weights_bytes"] + x["draft_kv_cache_bytes"], fits)
    doc.note(f"A round: {first['draft_tokens']} draft steps, then one target step over {first['draft_tokens'] + 1} "
             f"tokens per sequence, at context {first['context']:,} (the generation's middle); it yields "
             "(1 − A^(k+1)) / (1 − A) tokens (Leviathan et al. 2023, eq. 1). Speedup: over plain decoding's step at "
             "the same context. The draft runs whole on each GPU; fits: target and draft weights and KV caches, "
             f"the target's {units.nbytes(first['kv_cache_bytes'])} at batch {rows[0]['batch']} (the verify's "
             f"{first['draft_tokens']} positions more, and each sliding window's or chunk's ring W + "
             f"{first['draft_tokens']} slots, so that a rejected proposal can be rewound).")
    if first.get("measured"):
        _speculative_measured_table(doc, first)


def _speculative_measured_table(doc: Doc, first: dict[str, Any]) -> None:
    """--draft --measure: the rounds run on the device beside the prediction at the measured acceptance."""
    m = first["measured"]
    p, ratio = m["predicted_at_measured"], m["ratio"]
    t = doc.table(f"Speculative decoding measured on {m['device']}: {m['rounds']:,} rounds, {m['accepted']:,} of "
                  f"{m['proposed']:,} draft tokens accepted ({m['accept_rate']:.3g}), {m['tokens_per_round']:.3g} "
                  "tokens per round", Column("figure"), Column("measured", "seconds"),
                  Column("predicted", "seconds"), Column("ratio", "ratio"), name="speculative-measured")
    t.add("draft step", m["draft_step_s"], p["draft_step_s"], ratio["draft_step"])
    t.add("verify step", m["verify_step_s"], p["verify_step_s"], ratio["verify_step"])
    t.add("decode / token", m["decode_s_per_token"], p["decode_s_per_token"], ratio["decode"])
    t.add("plain decode / token", m["plain_decode_s_per_token"], None, None)
    if "kv_cache_bytes" in m:
        spare = m["ring_spare_slots"]
        doc.note(f"State allocated: target {m['kv_cache_bytes']:,} bytes, draft {m['draft_kv_cache_bytes']:,} bytes "
                 f"(counted: {p['kv_cache_bytes']:,} and {p['draft_kv_cache_bytes']:,}); a sliding window's or "
                 f"chunk's ring keeps {spare} spare slot{'s' if spare != 1 else ''} under speculation (W + {spare}), "
                 "so that a verify step can be rewound.", "dim")
    agree = "" if m.get("plain_agreement", 1) == 1 else (
        f" (plain one-token steps, other kernels: {m['plain_agreement']:.1%} of tokens equal, first difference at "
        f"token {m['plain_first_divergence']})")
    if not m["exact"] and m.get("first_divergence") is not None:
        agree += f"; {m['agreement']:.1%} equal, first difference at token {m['first_divergence']}"
    doc.note(f"Output {'equal to' if m['exact'] else 'NOT equal to'} the target's greedy output through the same "
             f"kernels over {m['tokens_checked']:,} tokens{agree}; measured speedup over plain decoding "
             f"{m['speedup']:.2f}× (predicted at the measured acceptance {p['speedup']:.2f}×). "
             f"Weights: {m['weights']}.",
             "dim" if m["exact"] else "warning")


def _chunked(x: dict[str, Any]) -> str:
    """How the prompts run: whole, or (chunked prefill) in the steps they ride on."""
    if not x.get("prefill_chunk"):
        return "each"
    steps = x["prefill_steps"] or 1
    return f"each, added to {steps:,} step{'s' if steps > 1 else ''} of at most {x['prefill_chunk']:,} tokens"


def _continuous_table(doc: Doc, r: InferReport, rows: list[dict[str, Any]]) -> None:
    """--rate: the steady state of continuous batching (tfcalc.count.serving.continuous)."""
    x = rows[0]["continuous"]
    if x is None:
        return
    load = (f"{x['rate_per_s']:g} requests/s" if not x.get("users") else
            f"{x['users']:,} users in a closed loop, {x['rate_per_s']:.3g} requests/s")
    t = doc.table(f"Continuous batching: {load}, {x['mean_input']:,} tokens in and "
                  f"{x['mean_output']:,} out on average", Column("in flight"), Column("TTFT", "seconds"),
                  Column("inter-token", "seconds"), Column("end to end", "seconds", priority=1),
                  Column("tok/s out", "tokens_rate"), Column("KV cache", "bytes", priority=1),
                  Column("capacity"), name="continuous")
    t.add("over capacity" if x["concurrency"] is None else f"{x['concurrency']:,.3g}", x["ttft_s"], x["itl_s"],
          x["e2e_s"], x["output_tokens_per_s"], x["kv_cache_bytes"], f"{x['max_rate_per_s']:,.3g} req/s")
    if x["over_capacity"]:
        why = {"prefill": "the prefills alone take the whole GPU",
               "decode": "decode steps grow faster with the batch than they serve it",
               "memory": "the KV cache of the sequences in flight passes the memory "
                         f"({x['max_concurrency'] or 0:,} fit)",
               "budget": f"the sequences in flight fill the {x.get('prefill_chunk') or 0:,} tokens a step carries "
                         "(--prefill-chunk), leaving no room for prompts",
               "batch": f"the sequences in flight pass the engine's cap of {x.get('max_batch') or 0:,} (--max-batch)"
               }  # a measured CPU knows no memory: None
        if x.get("users"):  # a closed loop is over capacity only when not one sequence fits
            doc.note(f"Not one sequence of {x['mean_input'] + max(1, x['mean_output'] // 2):,} positions fits beside "
                     "the weights: nothing is served (--require-fit: exit 1).", "warning")
        else:
            doc.note(f"Over capacity at {x['rate_per_s']:g} requests/s: {why[x['limit']]}; the queue grows without "
                     f"bound. The server sustains at most {x['max_rate_per_s']:.3g} requests/s (--require-fit: exit "
                     "1).", "warning")
    doc.note(f"Scheduler: {x['scheduler']}. In flight (the mean decode batch) by Little's law: rate × (O − 1) × "
             f"inter-token latency; prefills take {x['prefill_share']:.0%} of the GPU ({units.seconds(x['prefill_s'])} "
             + _chunked(x) + f"); capacity in requests/s; the KV cache holds {x['max_concurrency']:,} sequences of "
             f"{x['mean_input'] + max(1, x['mean_output'] // 2):,} positions at most"
             + (f", the engine {x['max_batch']:,} (--max-batch)" if x.get("max_batch") else "")
             + ". The table below: the static "
             + ("estimate at the largest batch that fits." if x["over_capacity"] else "estimate at that batch.")
             if x["max_concurrency"] is not None else
             f"Scheduler: {x['scheduler']}.")
    _prefix_note(doc, rows[0])
    pace_note(doc, x.get("attention_dp_pace"))
    if x.get("users") and x.get("method") and not x["over_capacity"]:
        doc.note(f"Lengths {x['lengths']} (--lengths): " + (
            f"the engine's steps simulated for {x['users']:,} users who start together, a first round then 8 measured; "
            f"TTFT p50 {units.seconds(x['ttft_p50_s'])}, p99 {units.seconds(x['ttft_p99_s'])}."
            if x["method"] == "schedule" else f"{x['method']}."))
    if x.get("measured"):
        _continuous_measured_table(doc, x)


def _continuous_measured_table(doc: Doc, x: dict[str, Any]) -> None:
    """--rate --measure: the server run on the device beside the steady state (tfcalc.report.continuous_measured)."""
    m = x["measured"]
    p, ratio = m["predicted"], m["ratio"]
    t = doc.table(f"Continuous batching measured on {m['device']}: {m['completed']:,} of {m['requests']:,} requests "
                  f"served in {m['span_s']:.3g} s ({m['lengths']}; {m['arrivals']})", Column("figure"),
                  Column("mean"), Column("median"), Column("p90"), Column("predicted"), Column("ratio", "ratio"),
                  name="continuous-measured")

    def secs(v: Any) -> str:
        return "" if v is None else units.seconds(v)

    for label, key, rkey in (("TTFT", "ttft_s", "ttft"), ("inter-token", "itl_s", "itl"),
                             ("end to end", "e2e_s", "e2e"), ("decode step", "decode_step_s", "decode_step"),
                             ("prefill", "prefill_s", "prefill")):
        s = m[key] or {}
        t.add(label, secs(s.get("mean")), secs(s.get("median")), secs(s.get("p90")), secs(p[key]), ratio[rkey])
    t.add("tok/s out", units.tokens_rate(m["output_tokens_per_s"]), "", "",
          "" if p["output_tokens_per_s"] is None else units.tokens_rate(p["output_tokens_per_s"]),
          ratio["output_tokens_per_s"])
    t.add("decode batch", "" if m["decode_batch_mean"] is None else f"{m['decode_batch_mean']:.3g}", "", "",
          "" if p["decode_batch"] is None else f"{p['decode_batch']:.3g}", ratio["decode_batch"])
    t.add("prefill share", f"{m['prefill_share']:.0%}", "", "", f"{p['prefill_share']:.0%}", None)
    if m.get("kv_span") is not None:
        step = m["decode_step_s"] or {}
        t.add("decode step as run", secs(step.get("mean")), secs(step.get("median")), secs(step.get("p90")),
              secs(p.get("decode_step_as_run_s")), ratio.get("decode_step_as_run"))
        span = m["kv_span"]
        read = f"{span['min']:,}" if span["min"] == span["max"] else f"{span['min']:,}-{span['max']:,}"
        doc.note(f"Each decode step ran all {m['decode_rows']:,} slots, each reading {read} positions of its cache "
                 f"(mean {span['mean']:,.0f}: the bucket of the longest row in flight) where "
                 f"the rows in flight hold {m['kv_live_mean']:,.1f} on average; 'decode step as run' prices that "
                 "step, 'decode step' the steady state's paged one.", "dim")
    if m["stopped_at_budget"]:
        doc.note(f"Stopped at the time budget ({m['time_budget_s']:g} s, --max-time): {m['completed']:,} of "
                 f"{m['requests']:,} requests done.", "warning")
    if m["exact"] is not None:
        doc.note(f"The last {m['checked_requests']} requests' tokens are {'' if m['exact'] else 'NOT '}their prompts' "
                 "greedy tokens decoded alone (batching must not change them).", "dim" if m["exact"] else "warning")
    doc.note(f"Measured: {m['slots']:,} KV cache slots, every token timed at the end of the iteration that made it; "
             "a run starts empty, so its first requests find fewer in flight than the steady state. Predicted: the "
             "steady state's means with the ceilings measured in this run. Ratios: predicted ÷ measured (means).",
             "dim")


def _measured_table(doc: Doc, r: InferReport, rows: list[dict[str, Any]]) -> None:
    mode = rows[0].get("mode")
    t = doc.table(_title(r, rows[0]) + ": measured beside predicted" + (f" ({mode} decode steps)" if mode else ""),
                  Column("batch", "int"),
                  Column("prefill", "seconds"), Column("predicted", "seconds"), Column("ratio", "ratio"),
                  Column("decode / token", "seconds"), Column("predicted", "seconds"), Column("ratio", "ratio"),
                  Column("tok/s total", "tokens_rate"), Column("achieved", "byte_rate", priority=1),
                  Column("MBU", "share", priority=1), Column("bound", priority=2), name="serving")
    for row in rows:
        p, ratio = row["predicted"], row["ratio"]
        t.add(row["batch"], row["prefill_s"], p["prefill_s"], ratio["prefill"], row["decode_s_per_token"],
              p["decode_s_per_token"], ratio["decode"], row["decode_tokens_per_s_total"],
              row["achieved_bandwidth_bytes_per_s"], row["mbu"], p["bound"])


def roofline_table(doc: Doc, title: str, step_rows: list[dict[str, Any]]) -> None:
    t = doc.table(title, Column("matmul"), Column("FLOPs", "flop"), Column("weights", "bytes"),
                  Column("KV", "bytes"), Column("activations", "bytes", priority=1),
                  Column("intensity", "intensity"), Column("time", "seconds"), Column("bound"), name="roofline")
    for x in step_rows:
        t.add(x["label"], x["flops"], x["weight_bytes"], x["kv_bytes"], x["activation_bytes"],
              None if x["flops"] == 0 else x["intensity"], x["time_s"], x["bound"])


def _experts_note(doc: Doc, r: InferReport) -> None:
    """Which experts' weights each step reads, at each batch (docs/serving.md, "Bytes per token")."""
    reads = [(b, r.experts_read(b)) for b in (e.batch for e in r.estimates)]
    if reads[0][1] is None:
        return
    E, k = reads[0][1]["n_expert"], reads[0][1]["top_k"]
    each = "; ".join(f"batch {b:,}: {x['decode_per_layer']:.3g} of {E} per decode step, "
                     f"{x['prefill_per_layer']:.4g} in the prefill" for b, x in reads)
    doc.note(f"Experts' weights read per layer (top-{k} of {E}, tokens routed uniformly: E·(1 − (1 − k/E)^tokens) "
             f"distinct experts; k at batch 1, all E once a batch touches them all): {each}.")


def _host_words(c, over: dict) -> str:
    """The launch mode the steps are priced in, and the host's time under eager (tfcalc.count.perf.inference, 6)."""
    if over["launch"] != "eager":
        return "; steps captured (--launch graph): no host time"
    return (f"; launched eagerly: the host's {over['kernels']:,} × {c.perf.host_op_s * 1e6:g} µs = "
            f"{units.seconds(over['host_s'])} a step, overlapping the GPU's (the longer counts)")


def _memory_words(first: dict[str, Any]) -> str:
    """The device memory, named: the driver's total less what the runtime reserves."""
    reserved = first["runtime_reserved_bytes"] or {}
    names = {"cuda_context": "the CUDA context", "comm_buffers": "NCCL's buffers"}
    less = " and ".join(f"{names.get(k, k)} ({units.nbytes(v)})" for k, v in reserved.items())
    return f"Memory: the driver's {units.nbytes(first['driver_memory_bytes'])} less {less}."


def _tp_note(doc: Doc, r: InferReport, first: dict[str, Any]) -> None:
    t = first["tensor_parallel"]
    if t is None:
        return
    kv = (f"each KV head on {t['kv_heads_replicated']} GPUs (replicated: T exceeds the KV heads)"
          if t["kv_heads_replicated"] > 1 else f"KV cache {t['kv_share_per_gpu']} per GPU")
    decode = t["decode_comm_s_per_step"]
    doc.note(f"Tensor parallel over {t['gpus']} GPUs ({t['link']}, {units.byte_rate(t['link_bytes_per_s'])} per GPU "
             f"each way): heads, FFN and vocabulary split, {kv}; {t['allreduces_per_decode_step']:,} all-reduces per "
             f"step (the embedding's, attention out, FFN out), {units.seconds(t['prefill_comm_s'])} in the prefill"
             + (f", {units.seconds(decode)} per decode step" if decode is not None else "")
             + f"; all GPUs' weights {units.nbytes(t['weights_bytes_all_gpus'])}.")
    m = t.get("measured")
    if m:
        def said(x: dict) -> str:
            return ", ".join(f"{v['calls']:,} {op.replace('_', '-')}{'s' if v['calls'] != 1 else ''} of "
                             f"{units.nbytes(v['payload_bytes'])}" for op, v in x.items())

        verdict = "equal to the prediction" if m["equal"] else (
            f"predicted: prefill {said(m['prefill']['predicted'])}; one-token step {said(m['decode']['predicted'])}")
        doc.note(f"Measured on {m['world_size']} {m['backend']} ranks (the real model under DTensor TP, {m['dtype']}, "
                 f"batch {m['batch']:,}): prefill of {m['seq']:,} tokens {said(m['prefill']['measured'])}; one-token "
                 f"step {said(m['decode']['measured'])}: {verdict}.", "ok" if m["equal"] else "warning")


def _state_note(doc: Doc, first: dict[str, Any]) -> None:
    """A hybrid's state (tfcalc.count.model.memory.StateSplit): what grows with the tokens, what does not, and
    the fixed state each decode step reads and writes whole."""
    g = first["generation_state"]
    if not g["fixed_state_bytes"] and g["kv_layers"] == g["layers"]:
        return
    parts = ", ".join(f"{n} {units.nbytes(x['bytes'])} in {x['dtype']}" for n, x in g["fixed_state"].items())
    doc.note(f"State at batch {first['batch']}: K/V {units.nbytes(g['kv_growing_bytes'])}, growing with the tokens in "
             f"{g['kv_layers']} of {g['layers']} layers; fixed {units.nbytes(g['fixed_state_bytes'])} ({parts}), the "
             f"same at any length, read and written whole by each decode step: "
             f"{units.nbytes(g['decode_step_fixed_state_read_bytes'])} read + "
             f"{units.nbytes(g['decode_step_fixed_state_written_bytes'])} written"
             + (" per GPU" if first["tp"] > 1 else "") + " (in bytes per token).")


def _notes(doc: Doc, r: InferReport, first: dict[str, Any]) -> None:
    c = r.ceilings
    sixteen = (f" for the FP8 GEMMs, {units.flop_rate(c.high_flops_per_s)} for attention and the LM head"
               if c.high_flops_per_s else "")  # FP8 weights (tfcalc.count.perf.fp8_time, step 3)
    doc.note(f"Ceilings: {units.flop_rate(c.flops_per_s)} ({r.fmt.compute_dtype}){sixteen} and "
             f"{units.byte_rate(c.bytes_per_s)}, "
             f"ridge {units.intensity(c.ridge)}; {c.source}. Weights: {units.nbytes(first['weights_bytes'])}"
             + (" per GPU." if r.gpus > 1 else "."))
    _tp_note(doc, r, first)
    if c.perf is not None and not from_table(c.perf):  # a device file: where each constant came from (issue 31)
        doc.note(constants_line(c.perf))
    over = first["predicted"]["overhead"]["decode_step"] if "overhead" in first["predicted"] else None
    if c.perf is not None and over:
        doc.note(f"Performance model: each matmul at its GEMM shape's share of the peak, the bandwidth at "
                 f"{c.perf.bandwidth_efficiency:.0%} of the datasheet; each decode step adds {over['kernels']:,} "
                 f"kernels × {c.perf.kernel_s * 1e6:g} µs" + (f", {units.seconds(over['dequant_s'])} of dequantization"
                                                              if over["dequant_s"] else "")
                 + (f", {units.seconds(over['moe_dispatch_s'])} of MoE top-k and sorting"
                    if over.get("moe_dispatch_s") else "")
                 + (f", {units.seconds(over['moe_permute_s'])} of copying the experts' rows into expert order"
                    if over.get("moe_permute_s") else "") + _host_words(c, over)
                 + "; the prefill the "
                 f"runtime's {units.seconds(c.perf.request_s)} per request. " + _memory_words(first)
                 + " More: docs/predictions.md.")
    if r.max_batch == 0:
        doc.note(f"The weights alone ({units.nbytes(first['weights_bytes'])}) do not fit "
                 f"{units.nbytes(first['memory_bytes'])}: shard them (tensor or pipeline parallel) or quantize "
                 "(--dtype int8/int4).", "warning")
    elif r.max_batch is not None:
        doc.note(f"Largest batch whose weights + KV cache ({r.seq + r.options.gen:,} positions) fit "
                 f"{units.nbytes(first['memory_bytes'])}: {r.max_batch:,} (activations and allocator slack not "
                 "counted: an upper bound).")
    whole = ("never turns compute-bound (the KV cache grows with the batch as the FLOPs do)"
             if r.compute_bound_batch is None else f"turns compute-bound at batch {r.compute_bound_batch:,}")
    weights = ("never do" if r.weight_matmuls_compute_bound_batch is None
               else f"do at batch {r.weight_matmuls_compute_bound_batch:,}")
    doc.note(f"Decode at context {r.seq:,} {whole}; its weight matmuls alone {weights}.")
    _experts_note(doc, r)
    if r.beyond_context:
        doc.note(f"{r.seq:,} + {r.options.gen:,} positions go past the {r.model.cfg.max_seq_len:,} the model encodes: "
                 "arithmetic only (the model could not run there).", "warning")
    _state_note(doc, first)
    doc.note("Bytes per token: weights + KV cache read per decode step (and a fixed state written back), over the "
             "batch; decode figures are the mean "
             "of the steps; predicted time = the slower of FLOPs/peak and bytes/bandwidth, matmul by matmul, "
             "summed. Ratios: predicted ÷ measured time. More: docs/serving.md.", "dim")


def document(reports: list[InferReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for r in reports:
        data = r.to_json()
        rows = data if isinstance(data, list) else [data]
        _continuous_table(doc, r, rows)
        disaggregated_table(doc, rows[0])
        (_measured_table if r.measured else _predicted_table)(doc, r, rows)
        _short_note(doc, r, rows)
        if rows[0]["continuous"] is None:  # under load the continuous table says it
            _prefix_note(doc, rows[0])
        _speculative_table(doc, r, rows)
        ep_table(doc, rows)
        ep_measured_note(doc, rows[0])
        _notes(doc, r, rows[0])
        if r.measured:
            busy_note(doc, rows[0])
        if verbose:
            last = rows[-1]
            roofline_table(doc, f"Roofline of the prefill, batch {last['batch']}", last["roofline"]["prefill"])
            if last["roofline"]["first_decode_step"]:
                roofline_table(doc, f"Roofline of the first decode step, batch {last['batch']}",
                               last["roofline"]["first_decode_step"])
        else:
            doc.note("Each matmul's FLOPs, bytes, intensity and bound: --verbose.", "dim")
    return doc


def busy_note(doc: Doc, first: dict[str, Any]) -> None:
    """A warning when the host ran more work than it has CPUs while timing."""
    if first.get("busy"):
        doc.note(f"The host was busy while timing (load average {first['load_average']:.1f} on {first['cpus']} CPUs): "
                 "the timings include waiting for other processes, and OpenMP threads spinning at barriers make "
                 "small steps much slower (OMP_WAIT_POLICY=PASSIVE lets them sleep). Compare ratios from quiet runs.",
                 "warning")
