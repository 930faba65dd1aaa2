"""`tfcalc plan` as a document: the layouts searched, then one layout's memory per rank, collectives per
step, step time and training time; with --measure, the plan of the measured run beside what it measured."""

from __future__ import annotations

from tfcalc import devices, units
from tfcalc.cli.render.doc import Cell, Column, Doc
from tfcalc.count.perf.pipeline import chunk_micro_batches
from tfcalc.count.perf.slowest_rank import expected_max, sigma
from tfcalc.count.training import sharding
from tfcalc.count.training.context_parallel import ring_exposed
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.pipeline_fsdp import stage_gathered
from tfcalc.count.training.plan import muon_json
from tfcalc.count.training.shard import stage_block_counts, total_blocks
from tfcalc.count.training.steptime import collective_seconds, group_in_node
from tfcalc.report.plan import PlanReport
from tfcalc.report.plan_check import STATE_KEYS, PlanCheck
from tfcalc.report.plan_search import host_words, searched_offload

CAUSES = {
    "dp_grads": "DP gradients", "zero_params": "ZeRO/FSDP weight gathers", "tp_activations": "TP activations",
    "fp8_amax": "FP8 weight amaxes (FP8 gathers)",
    "tp_loss": "TP vocabulary-parallel loss", "tp_norm_grads": "TP (SP) norm gradients",
    "pp_activations": "PP activations", "pp_tied_embedding": "PP tied embedding",
    # issue 20, sharding (tfcalc.count.training.sharding, tfcalc.count.training.experts_parallel)
    "expert_grads": "Expert gradients", "expert_params": "Expert weight gathers",
    "ep_counts": "EP token counts", "ep_tokens": "EP token dispatch and combine",
    "etp_tokens": "ETP expert-row gathers",  # experts folded, ETP > 1 (tfcalc.count.training.experts_folded)
    # issue 20, pipeline and context (tfcalc.count.training.context_parallel)
    "cp_kv": "CP ring K/V (and gradients)",
}
STATE_LABELS = {"weights_bytes": "Weights", "grads_bytes": "Gradients", "optimizer_bytes": "Optimizer states",
                "activation_bytes": "Activations", "total_bytes": "Total"}


def muon_note(r) -> str:
    """The Muon step's parts (tfcalc.count.training.muon_plan)."""
    m = muon_json(r.model.cfg, r.plan, r.hardware)
    return (f"Muon: Newton-Schulz {m['ns_flops']:.3g} FLOP in {m['ns_s'] * 1e3:.3g} ms, matrices all-gathered "
            f"{m['gather_bytes'] / 2**30:.3g} GiB in {m['gather_s'] * 1e3:.3g} ms, elementwise "
            f"{m['elementwise_s'] * 1e3:.3g} ms; AdamW on the rest")


def short(layout: Layout) -> str:
    """'tp 8+SP · pp 2 · dp 4 · ZeRO-1 · selective recompute' (with cp, a schedule other than 1F1B, the
    micro-batch when above 1 and overlap where they apply)."""
    sp = "+SP" if layout.sequence_parallel else ""
    recompute = "no recompute" if layout.recompute == "none" else f"{layout.recompute} recompute"
    cp = f" · cp {layout.cp}" if layout.cp > 1 else ""
    sched = ("" if layout.schedule == "1f1b" else f" {layout.schedule}" + (
        f" V{layout.virtual_stages}" if layout.virtual_stages > 1 else "")) + (
        f" ({'+'.join(layout.pp_split_counts)} as blocks)" if layout.pp_split_counts else "")
    micro = f" · mb {layout.micro_batch}" if layout.micro_batch > 1 else ""
    overlap = f" · overlap {'+'.join(layout.overlap)}" if layout.overlap else ""
    kernels = {"fused": ", fused kernels", "compile": ", compiled blocks"}.get(layout.kernels, "")
    if layout.kernels == "compile" and layout.rope == "complex":  # count.perf.elementwise, 6
        kernels += " (complex RoPE left to aten)"
    more = sharding.describe(layout) + kernels
    more = more.lstrip(", ")
    return (f"tp {layout.tp}{sp}{cp} · pp {layout.pp}{sched} · dp {layout.dp} · ZeRO-{layout.zero} · {recompute}"
            f"{micro}{overlap}" + (f" · {more}" if more else ""))


def overlapped(L: Layout) -> str:
    """What the step hides behind compute (tfcalc.count.perf.pipeline) and what it does not."""
    hidden = ["DP reduction behind the backward pass"]
    if "tp" in L.overlap:
        hidden.append("TP all-gathers/reduce-scatters behind the GEMMs")
    if "pp" in L.overlap:
        hidden.append("PP sends but the fill's and drain's")
    if L.cp > 1 and not ring_exposed(L):
        hidden.append("CP ring behind attention")
    if "ep" in L.overlap:
        hidden.append("EP all-to-alls behind another micro-batch but 1/m")
    shown = [g.upper() for g in ("tp", "pp", "ep") if g not in L.overlap and getattr(L, g) > 1]
    shown += ["CP ring (traced by torch.compile)"] if L.cp > 1 and ring_exposed(L) else []
    return "; ".join(hidden) + (f"; {', '.join(shown)} not" if shown else "")


def _days(seconds: float) -> str:
    days = seconds / 86400
    if days >= 1e9:  # a billion days: a digit string past that says nothing more
        return f"{days:.4g} days"
    return f"{days:,.1f} days" if seconds >= 86400 else units.seconds(seconds)


def _search(doc: Doc, r: PlanReport) -> None:
    what = (f"the fewest GPUs that fit: {r.plan.layout.gpus}" if r.search == "gpus"
            else f"layouts of {r.plan.layout.gpus} GPUs that fit") + (" with offload" if searched_offload(r) else "")
    t = doc.table(f"{r.model.label} on {r.device.name}: {what} ({len(r.candidates)}), fastest first",
                  Column("#", "int"), Column("Layout"), Column("Micro-batches", "int", priority=2),
                  Column("Memory per rank", "bytes"), Column("Step", "seconds"), Column("MFU", "share"), name="layouts")
    for i, c in enumerate(r.candidates[: r.request.top], 1):
        t.add(i, short(c.layout), c.layout.micro_batches, c.memory.total, c.step.overlap_s, c.step.mfu,
              style="bold" if i == 1 else "")
    if searched_offload(r):  # the answer, in words, where it is read (not only in the notes at the end)
        doc.note(host_words(r) + ".", "warning")


def _memory(doc: Doc, r: PlanReport) -> None:
    m, L = r.plan.memory, r.plan.layout
    t = doc.table(f"{r.model.label}: {short(L)}, {L.gpus} × {r.device.key} — memory of one rank (stage {m.stage}, "
                  "TP rank 0)", Column("Memory"), Column("Bytes", "bytes"), Column("How", priority=1), name="memory")
    n = sharding.shard_dp(L)
    experts = f", experts 1/{sharding.expert_dp(L)}" if sharding.experts_apart(L) else ""
    zero = {0: "whole", 1: "whole", 2: "whole", 3: f"1/{n}{experts}, rows padded"}[L.zero]
    etp = f"each 1/{L.etp}" if (L.etp or 1) > 1 else ""  # experts folded (count.training.experts_folded)
    held = f" (1/{L.ep} of the experts{', ' + etp if etp else ''})" if L.ep > 1 else f" (the experts {etp})" if etp \
        else ""
    t.add("Weights", m.weights, f"{m.params:,} params{held}: no {L.dtype} shard, FSDP2's fp32 shard is the master "
          "(optimizer states); gathered below" if m.weights == 0 and L.zero == 3 else
          f"{m.params:,} params{held} × {L.dtype}; {zero}")
    kept = f", and the {L.dtype} .grad kept beside (DeepSpeed BF16_Optimizer)" if L.zero_engine == "deepspeed" else ""
    t.add("Gradients", m.grads, f"{L.grad_dtype or L.dtype}; " + (f"1/{n}{experts}" if L.zero >= 2 else "whole") + kept)
    states = "Muon momentum (matrices), AdamW m and v (the rest)" if L.optimizer == "muon" else "Adam m and v"
    t.add("Optimizer states", m.optimizer, f"fp32 master, {states}; " + (f"1/{n}{experts}" if L.zero else "whole")
          + ("; offloaded to the host" if L.offload_optimizer else ""))
    recompute = "no recompute" if L.recompute == "none" else f"{L.recompute} recompute"
    chunks = chunk_micro_batches(L, m.stage)
    how = (f"of stages {m.stage} and {2 * L.pp - 1 - m.stage} (DualPipeV)" if L.schedule == "dualpipev" and L.pp > 1
           else "(interleaved)")
    flight = (f"{chunks[0]} in flight" if len(chunks) == 1 else  # 1F1B's p − i, dualpipe's p + 1 (perf.pipeline)
              f"{'+'.join(map(str, chunks))} chunk micro-batches in flight {how}")
    of = f"{L.micro_batch} × {L.seq:,}" + (f" / cp {L.cp}" if L.cp > 1 else "")
    t.add("Activations", m.activations, f"{L.attention} attention, {recompute}; {flight} of {of}")
    if L.offload_activations:
        t.add("  offloaded", None, "the activations above stay on the GPU: all but 2 blocks' saved activations "
              "are in host memory")
    if m.fp8_cache:
        t.add("FP8 weight casts", m.fp8_cache, "each FP8 linear's weight and its transpose, 1 byte each, kept "
              "for the backward; amax histories (Transformer Engine)")
    if m.gathered:
        t.add("Gathered weights (ZeRO-3)", m.gathered, "running + prefetched unit, unsharded" if not stage_gathered(L)
              else "every unit of the stage, kept from forward to backward" if L.pp == 1 else
              "every unit of the stage: the pipeline's backward does not reshard")
    if m.accumulated_grads:
        t.add("Unsharded gradients (PP)", m.accumulated_grads, f"the stage's, {L.grad_dtype or L.dtype}, accumulated "
              "over the micro-batches: reduce-scattered after the last")
    memory = r.plan.memory_limit
    style = "bold" if m.total <= memory else "bold red"
    t.add("Total: " + ("fits" if m.total <= memory else "does not fit"), m.total,
          f"{m.total / memory:.0%} of {units.nbytes(memory)} usable: the driver's "
          f"{units.nbytes(devices.driver_bytes(r.device))} less the CUDA context and NCCL buffers", style=style)
    if m.host:
        t.add("Host memory (offload)", m.host, "not in the total: " + " and ".join(
            w for w, on in (("fp32 master, Adam m and v, fp32 gradients of the shard", L.offload_optimizer),
                            ("offloaded activations", L.offload_activations)) if on))
        p = r.plan
        node = ("the node's host memory is not known: not checked (host_memory_bytes in a device file)"
                if p.host_limit is None else f"{p.host_per_node / p.host_limit:.0%} of the node's "
                f"{units.nbytes(p.host_limit)} ({r.device.host_memory_source})")
        t.add("Host memory per node: " + ("fits" if p.host_fits else "does not fit"), p.host_per_node,
              f"{p.ranks_per_node} ranks × the rank's; {node}", style="bold" if p.host_fits else "bold red")


def _comm(doc: Doc, r: PlanReport) -> None:
    L, hw_gpn, hw = r.plan.layout, r.device.gpus_per_node, r.hardware
    t = doc.table(f"Communication per step, one rank ({L.micro_batches} micro-batches)", Column("Cause"),
                  Column("Collective"), Column("Group"), Column("Calls", "int", priority=1),
                  Column("Payload", "bytes", priority=1), Column("Sent per rank", "bytes"), Column("Time", "seconds"),
                  name="communication")
    for c in r.plan.collectives:
        fast = group_in_node(c.group, L, hw_gpn)  # NVLink-class link inside a node
        link = devices.intra_link_name(r.device) if fast else "network"  # PCIe nodes say PCIe
        if c.links is not None:  # both at once (expert parallelism across nodes: count.training.experts_parallel)
            link = f"network + {devices.intra_link_name(r.device)}"
        # the performance model's seconds (NCCL's choice per call, tfcalc.count.training.steptime step 4): the rows
        # add up to the step table's communication per group
        t.add(CAUSES.get(c.cause, c.cause), c.op.replace("_", "-"), f"{c.group} ×{c.group_size}, {link}",
              "—" if c.calls is None else c.calls, c.payload_bytes, c.sent_bytes, collective_seconds(c, L, hw))
    if not r.plan.collectives:
        t.add("none: one GPU", None, None, None, None, None, None)


def _time(doc: Doc, r: PlanReport) -> None:
    st, L = r.plan.step, r.plan.layout
    basis = (f"at an end-to-end MFU of {st.mfu:.0%} (--mfu)" if st.basis == "mfu" else
             f"matmuls at {r.request.matmul_efficiency:.0%} of the peak (--matmul-efficiency)"
             if st.basis == "matmul-efficiency" else "from the performance model")
    peak = units.flop_rate(r.device.peak(L.dtype))
    t = doc.table(f"Step time {basis}; {L.dtype} peak {peak}",
                  Column("Step"), Column("Seconds", "seconds"), Column("How", priority=1), name="step")
    t.add("Compute, one GPU", st.compute_s, f"{units.flop(st.executed_flops)} / {L.gpus} GPUs; matmuls "
          f"{st.matmul_s:.3g} s at their GEMM shapes, the rest non-matmul traffic ({L.kernels} kernels) and "
          "kernel costs")
    if r.moe_dispatch_s:  # tfcalc.count.perf.moe_dispatch
        t.add("  of it, MoE dispatch", r.moe_dispatch_s, "router top-k, sorting the pairs by expert, permute and "
              "unpermute: memory-bound")
    if r.expert_imbalance != 1.0:  # tfcalc.count.perf.expert_imbalance
        t.add("  of it, expert imbalance", None, f"the expert GEMMs × {r.expert_imbalance:.3f}: every rank waits for "
              f"the one of {L.ep} EP ranks whose experts received the most tokens (--expert-imbalance)")
    if L.pp > 1:
        rule = {"1f1b": "1F1B (p−1)/(m+p−1)", "interleaved": f"interleaved ((p−1)/V)/(m+(p−1)/V), V {L.virtual_stages}",
                "zero-bubble": "ZB-H1 (p−1)(F+B−W) over m(F+B+W) + that",
                "dualpipe": "DualPipe (p/2−1)(F+2B−W) over m(F+B+W) + that",
                "dualpipev": "DualPipeV (p−1)/2·(F+2B−W) over m(F+B+W) + that"}[L.schedule]
        counts = stage_block_counts(total_blocks(r.model.cfg), L.pp, L.virtual_stages, L.stage_split)
        counted = (f"; {' and '.join(L.pp_split_counts)} counted as a block each, blocks per stage "
                   f"{'/'.join(map(str, counts))}" if L.pp_split_counts else
                   f"; blocks per stage {'/'.join(map(str, counts))} as given, the slowest stage paces the step"
                   if L.pp_layers else "")
        t.add("  with the pipeline bubble", st.pipelined_s, f"{rule} = {st.bubble:.1%} idle{counted}")
    for group, seconds in st.comm_s.items():
        if seconds:
            t.add(f"Communication, {group}", seconds, None)
    if st.optimizer_s:
        t.add("Optimizer step", st.optimizer_s, "Adam over the rank's shard, memory-bound, after the reductions"
              if L.optimizer != "muon" else muon_note(r))
    t.add("Step, no overlap", st.no_overlap_s, "compute + all communication")
    if st.contention_s:  # overlap's own cost (tfcalc.count.training.steptime, step 5)
        t.add("  overlap's cost", st.contention_s, f"the compute under overlapped collectives on "
              f"{r.hardware.perf.sm_count - r.hardware.perf.comm_sms} of {r.hardware.perf.sm_count} SMs "
              f"(NCCL's kernel holds {r.hardware.perf.comm_sms})")
    if st.ep_contention_s:  # --overlap ep's cost (tfcalc.count.training.experts_parallel, step 4)
        t.add("  EP overlap's cost", st.ep_contention_s, "the compute beside the overlapped all-to-alls on the SMs "
              "their kernels leave")
    if st.hbm_contention_s:  # tfcalc.count.training.overlap_costs, 1
        t.add("  overlap's HBM cost", st.hbm_contention_s, "memory-bound kernels beside the overlapped DP traffic")
    if st.fsdp_copy_s:  # tfcalc.count.training.overlap_costs, 2
        t.add("  FSDP2 copies", st.fsdp_copy_s, "all-gather copy-out and reduce-scatter copy-in, on the compute stream")
    if st.slowest_rank_s:  # tfcalc.count.perf.slowest_rank
        perf = r.hardware.perf
        t.add(f"  slowest of {L.gpus:,} GPUs", st.slowest_rank_s, f"matmuls × σ {sigma(perf.gpu_variation):.2%} × "
              f"e_N {expected_max(L.gpus):.2f}: GPUs spread {perf.gpu_variation:.0%} (Sinha et al. 2022)")
    if r.request.power_limit is not None:  # tfcalc.count.training.overlap_costs.power_capped_clock
        t.add(f"Clock at a {r.request.power_limit:g} W power limit: {r.hardware.perf.sustained_clock:.3f}", None,
              f"of the datasheet's, ((limit − {r.hardware.perf.static_power_w:g} W static) / (rated − static))^(1/3): "
              "dynamic power ∝ f·V², V ∝ f")
    if st.basis == "mfu":
        t.add("Step, performance model", st.physics_s, f"MFU {r.physics_mfu:.1%} predicted")
        t.add("Step, at --mfu", st.overlap_s, "model FLOPs / (MFU × peak × GPUs)", style="bold")
    else:
        t.add("Step, overlapped", st.overlap_s, overlapped(L), style="bold")
    # figures without a unit of seconds sit in the label, the one column never hidden
    t.add(f"Tokens per second: {units.tokens_rate(r.tokens_per_s)}", None, None)
    if r.mfu_fp8_peak is not None:  # FP8 matmuls: say which peak (tfcalc.count.perf.fp8_time, step 4)
        t.add(f"MFU: {st.mfu:.1%} of the {L.dtype} peak", None, f"model FLOPs (3 × forward) / step; "
              f"{r.mfu_fp8_peak:.1%} of the FP8 peak ({units.flop_rate(r.device.peak('fp8'))})")
    else:
        t.add(f"MFU: {st.mfu:.1%}", None, "model FLOPs (3 × forward) / step" if r.request.lora is None else
              "the FLOPs LoRA runs (forward, input gradients, adapters) / step")
    if r.training is not None:
        run = r.training
        t.add(f"Training on {units.params(run.tokens)} tokens", _days(run.seconds),
              f"{run.steps:,} steps; {run.gpu_hours:,.0f} GPU-hours", style="bold", rule=True)
        t.add(f"Chinchilla-optimal tokens: {units.params(run.chinchilla_tokens)}", None,
              f"{run.chinchilla_tokens / r.params:.1f} per parameter (Hoffmann et al. 2022, Table 3, interpolated)")


def _measured(doc: Doc, m: PlanCheck) -> None:
    r0, where = m.rank0, f"{m.rank0['world_size']} {m.rank0['backend']} ranks on {m.rank0['device']}"
    what = f"{m.cfg.name}, {m.cfg.n_layer} blocks, d_model {m.cfg.d_model}" if m.small else m.cfg.name
    t = doc.table(f"Measured: {what}, {short(m.layout)}, seq {m.layout.seq}, micro-batch {m.layout.micro_batch} × "
                  f"{m.layout.micro_batches}, fp32, on {where} (rank 0)", Column("Per rank"),
                  Column("Plan", "bytes"), Column("Measured", "bytes"), Column("Ratio", "ratio"), name="measured")
    planned, measured = m.planned_per_rank, m.per_rank
    for key in (*STATE_KEYS, "activation_bytes", "total_bytes"):
        label = STATE_LABELS[key] + (" (saved by autograd)" if key == "activation_bytes" else
                                     " (peak memory)" if key == "total_bytes" else "")
        ok = key not in STATE_KEYS or planned[key] == measured[key]
        t.add(label, planned[key], Cell(measured[key], "" if ok else "red"),
              measured[key] / planned[key] if planned[key] else None)
    c = doc.table("Measured collectives, one step, rank 0", Column("Cause"), Column("Collective"),
                  Column("Calls plan", "int"), Column("Calls", "int"), Column("Payload plan", "bytes"),
                  Column("Payload", "bytes"), Column("Ratio", "ratio"), name="measured-collectives")
    found = {(x["cause"], x["op"]): x for x in m.collectives}
    for p in m.planned_collectives:
        x = found.get((p.cause, p.op), {"calls": 0, "payload_bytes": 0})
        c.add(CAUSES.get(p.cause, p.cause), p.op.replace("_", "-"), "—" if p.calls is None else p.calls, x["calls"],
              p.payload_bytes, Cell(x["payload_bytes"], "" if x["payload_bytes"] == p.payload_bytes else "red"),
              x["payload_bytes"] / p.payload_bytes)
    for key, x in found.items():
        if key not in {(p.cause, p.op) for p in m.planned_collectives}:
            c.add(CAUSES.get(x["cause"], x["cause"]), x["op"], None, x["calls"], None, Cell(x["payload_bytes"], "red"),
                  None)
    exact = m.states_exact and m.collectives_exact
    doc.note(("Plan and measurement agree exactly on model-state bytes and on every collective's bytes and calls."
              if exact else "Plan and measurement DISAGREE (red above)."), "ok" if exact else "bad")
    if m.left_out:
        doc.note(f"Not in the measured run: {', '.join(m.left_out)}.", "warning")
    doc.note(f"Peak memory: {r0['peak_method']}; activations: Korthikanti's terms (with dropout masks and stored "
             "scores) against the bytes autograd saves in tfcalc's model (no dropout, fused attention).", "dim")


def _notes(doc: Doc, r: PlanReport) -> None:
    for note in r.notes:
        doc.note(f"Assumed: {note}.", "warning")
    doc.note("Ring conventions: all-gather and reduce-scatter send (N−1)/N of the payload per rank, all-reduce "
             "2(N−1)/N; payload = the reduced tensor, the gathered output, the scattered input. Per rank = TP "
             f"rank 0 of the stage shown (largest torch.chunk blocks). Device: {r.device.name}, "
             f"{r.device.memory_bytes / 1e9:g} GB on the datasheet, {devices.intra_link_name(r.device)} "
             f"{r.device.intra_node_bytes_per_s / 1e9:g} GB/s and "
             f"network {r.device.inter_node_bytes_per_s / 1e9:g} GB/s per GPU and direction, "
             f"{r.device.gpus_per_node} GPUs per node ({r.device.source}). Chinchilla: Hoffmann et al. 2022.", "dim")


def document(reports: list[PlanReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for r in reports:
        doc.separate()
        if r.search is not None:
            _search(doc, r)
        _memory(doc, r)
        _comm(doc, r)
        _time(doc, r)
        if r.measured is not None:
            _measured(doc, r.measured)
        _notes(doc, r)
    return doc
