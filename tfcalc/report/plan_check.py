"""A plan checked on a real distributed run (`tfcalc plan --measure --nproc N`).

What runs, and why it is a fair check of the plan:
1. The layout, on N local ranks: the plan's tensor-parallel degree where it divides N (else the largest
   common divisor), data parallel over the rest, the same ZeRO stage and sequence parallelism. ZeRO as
   PyTorch ships it: 0 DDP; 1 ZeroRedundancyOptimizer beside DDP (planned as such, zero_engine "torch":
   tfcalc.count.training.sharding, step 7); 2 FSDP2 without resharding after forward (PyTorch has no ZeRO-2
   engine: planned as ZeRO-3 without resharding); 3 FSDP2. Expert parallelism (ep = dp, tp 1, DDP:
   tfcalc.measure.experts_parallel). No recompute: the measurement has no engine for it (planned, and
   said to be left out); a pipeline runs as step 4. No engine either for HSDP (4 ranks or more), FP8 (no FP8
   GEMM on a CPU; the run is fp32, so no fp32 gradient buffer either) and offload (nothing to offload to
   from a CPU).
   Context parallelism (--cp) is refused: PyTorch's context_parallel has no CPU kernel to run on gloo.
2. The model: the config itself when it has at most MEASURE_PARAMS parameters, else a small copy with
   every architectural choice kept (norms, activation, gating, biases, positions, tying, GQA, latent
   attention, mixed dense and MoE layers, windows, chunks and NoPE layers) and sizes shrunk so every split
   stays even (tfcalc.report.small_copy), its depth made on the description with at least one block of
   each kind of layer (small_blocks). Sequence ≤ 64 tokens, micro-batch ≤ 2, ≤ 2
   micro-batches per step; fp32 (gloo reduces fp32 everywhere; fp32 Adam is 16 bytes per parameter too,
   split 4/4/8 instead of 2/2/12).
3. The plan of exactly that configuration and layout, computed by the same code as the full plan, beside
   the measurement: model-state bytes (rank 0, the largest torch.chunk blocks) and every collective's
   payload and calls must agree exactly; activations (Korthikanti's terms against the bytes autograd
   really saves) and peak memory (against the plan's total) are shown with their ratio.
4. A pipeline (pp > 1, tp 1): one stage a rank; on 4 ranks or more with dp planned, dp = gcd(dp, N/2)
   replicas of N/dp stages, gradients all-reduced over each stage's dp group (else dp 1); the planned
   schedule (1F1B; interleaved with its V; zero-bubble as PyTorch's ScheduleInterleavedZeroBubble on one
   stage a rank), pp micro-batches a replica (a multiple of pp, as the interleaved schedule needs), a small
   copy of pp × V blocks, run by torch.distributed.pipelining (tfcalc.measure.pipeline); every rank's
   model states and collectives against its own stage's plan. --schedule dualpipe and dualpipev run
   PyTorch's ScheduleDualPipeV (DualPipe cut in half: 2 × pp stages in a V, one copy of the parameters) on
   2 × pp micro-batches a replica and a copy of at least 2 × pp blocks; the plan beside it is DualPipeV's
   (tfcalc.count.perf.pipeline, step 5), and a planned dualpipe (two copies, step 4) is named as left out.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from tfcalc.config import ModelConfig
from tfcalc.count.model.activations import default_attention
from tfcalc.count.model.params import total as param_total
from tfcalc.count.training.comm import by_key
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.count.training.plan import Plan, make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.report.small_copy import MEASURE_SEQ, small_copy

_CP_NOT_RUN = ("--cp is planned, not measured: PyTorch's context_parallel has no CPU kernel to run on gloo "
               "(aten._scaled_dot_product_flash_attention_for_cpu has no sharding strategy); leave out --measure")
MEASURE_PARAMS = 20_000_000
MEASURE_MICRO_BATCH, MEASURE_MICRO_BATCHES = 2, 2
STATE_KEYS = ("weights_bytes", "grads_bytes", "optimizer_bytes")


def measured_layout(layout: Layout, nproc: int) -> Layout:
    """The layout the ranks run (step 1 of the module docstring; a pipeline: step 4)."""
    if layout.pp > 1 and layout.tp == 1:  # a pipeline (with TP planned too, the run keeps the TP: step 1)
        interleaved = layout.schedule == "interleaved"
        dual = layout.schedule in ("dualpipe", "dualpipev")  # both run PyTorch's DualPipeV (step 4)
        schedule = layout.schedule if interleaved or layout.schedule == "zero-bubble" else "dualpipev" if dual \
            else "1f1b"
        micro = min(layout.micro_batch, MEASURE_MICRO_BATCH)
        # data parallel beside the pipeline where at least 2 stages are left a replica: DDP on each stage
        dp = math.gcd(layout.dp, nproc // 2) if nproc >= 4 else 1
        return dataclasses.replace(
            layout, tp=1, pp=nproc // dp, dp=dp, cp=1, seq=min(layout.seq, MEASURE_SEQ), micro_batch=micro,
            global_batch=micro * nproc * (2 if dual else 1), zero=0, recompute="none", sequence_parallel=False,
            dtype="fp32", schedule=schedule, virtual_stages=layout.virtual_stages if interleaved
            else 1, overlap=tuple(o for o in layout.overlap if o == "pp"),
            # the sharding and precision variants are left out of a measured pipeline (_left_out says so)
            reshard_after_forward=True, compute_dtype=None, grad_dtype=None, hsdp=None, offload_optimizer=False,
            offload_activations=False, ep=1, zero_engine="flat",
            pp_layers=layout.pp_layers if nproc // dp == layout.pp and not dual else (),  # a given split: as many
            pp_split_counts=() if dual else layout.pp_split_counts,  # DualPipeV places its stages itself
            optimizer="adam")  # Muon is measured on DDP without TP or a pipeline only
    tp = math.gcd(layout.tp, nproc)
    dp = nproc // tp
    seq = min(layout.seq, MEASURE_SEQ)
    micro = min(layout.micro_batch, MEASURE_MICRO_BATCH)
    zero = layout.zero if dp > 1 else 0
    # PyTorch has no ZeRO-2 engine; what it offers is FSDP2 keeping each unit gathered from its forward to its
    # backward: sharded storage, one gather per block and micro-batch, a reduce-scatter per micro-batch
    keep = zero == 3 and layout.reshard_after_forward or zero not in (2, 3)
    return dataclasses.replace(
        layout, tp=tp, pp=1, dp=dp, seq=seq, micro_batch=micro,
        global_batch=dp * micro * min(layout.micro_batches, MEASURE_MICRO_BATCHES),
        zero=3 if zero == 2 else zero, recompute="none", sequence_parallel=layout.sequence_parallel and tp > 1,
        dtype="fp32", reshard_after_forward=keep, compute_dtype=None, grad_dtype=None,
        hsdp=layout.hsdp if layout.hsdp and layout.hsdp < dp and dp % layout.hsdp == 0 else None,
        offload_optimizer=False, offload_activations=False,
        ep=math.gcd(layout.ep, dp), zero_engine="torch" if zero == 1 else "flat",
        ep_dispatch="alltoall",  # gloo's all_to_all_single: one copy per token and expert (experts_parallel, 3)
        schedule="1f1b", virtual_stages=1, pp_split_counts=(), pp_layers=(),
        overlap=tuple(o for o in layout.overlap if o == "tp" and tp > 1 and layout.sequence_parallel),
        # Muon runs as torch.optim.Muon on whole matrices: DDP without TP (tfcalc.measure.muon_step); else Adam
        optimizer=layout.optimizer if zero == 0 and tp == 1 else "adam")


@dataclass(frozen=True)
class PlanCheck:
    cfg: ModelConfig  # what ran
    small: bool  # a small copy of the planned model
    layout: Layout  # what ran
    plan: Plan  # the plan of exactly that
    ranks: tuple[dict[str, Any], ...]  # each rank's answer (tfcalc.measure.distributed)
    left_out: tuple[str, ...]  # parts of the planned layout the run does not have

    @property
    def rank0(self) -> dict[str, Any]:
        return self.ranks[0]

    @property
    def per_rank(self) -> dict[str, int]:
        r = self.rank0
        return {**{k: r[k] for k in STATE_KEYS}, "activation_bytes": r["activation_bytes"],
                "total_bytes": r["peak_bytes"]}

    @property
    def planned_per_rank(self) -> dict[str, int]:
        """The plan of what rank 0 holds: the shown stage's, or under a pipeline stage 0's (the shown stage is
        the plan's largest: with --pp-split-counts it may be another)."""
        m = self.plan.memory
        if self.layout.pp > 1 and m.stage != 0:
            from tfcalc.count.training.rank_memory import stage_activations
            from tfcalc.count.training.shard import stage_block_counts, total_blocks

            L = self.layout
            states = self.rank_plans()[0][0]
            blocks = stage_block_counts(total_blocks(self.cfg), L.pp, L.virtual_stages, L.stage_split)[0]
            acts = stage_activations(self.cfg, L, 0, blocks)
            return {**states, "activation_bytes": acts, "total_bytes": sum(states.values()) + acts}
        return {"weights_bytes": m.weights, "grads_bytes": m.grads, "optimizer_bytes": m.optimizer,
                "activation_bytes": m.activations, "total_bytes": m.total}

    @property
    def planned_collectives(self) -> list:
        """Rank 0's planned collectives (a pipeline's: stage 0's)."""
        return list(self.rank_plans()[0][1]) if self.layout.pp > 1 else list(self.plan.collectives)

    @property
    def collectives(self) -> list[dict[str, Any]]:
        """Rank 0's collectives; an all-to-all's payload as the mean over the ranks (expert parallelism: a
        rank receives what the routing sends it, so only the mean is the plan's, every row sent once)."""
        out = []
        for c in self.rank0["collectives"]:
            if c["op"] == "all_to_all":
                same = [x["payload_bytes"] for a in self.ranks for x in a["collectives"]
                        if (x["cause"], x["op"]) == (c["cause"], c["op"])]
                total = sum(same)
                c = dict(c, payload_bytes=total // len(self.ranks) if total % len(self.ranks) == 0
                         else total / len(self.ranks))
            out.append(c)
        return out

    @property
    def comm_bytes(self) -> dict[str, int]:
        from tfcalc.count.training.comm import Collective

        return by_key(Collective(**c) for c in self.collectives)

    def rank_plans(self) -> list[tuple[dict[str, int], list]]:
        """A pipeline's plan of each rank: its stage's (rank r holds stage r mod pp: the (dp, pp) mesh)."""
        plans = stage_plans(self.cfg, self.layout)
        return [plans[r % self.layout.pp] for r in range(len(self.ranks))]

    @property
    def states_exact(self) -> bool:
        if self.layout.pp > 1:  # a pipeline: every rank against its own stage's plan
            return all(all(r[k] == v for k, v in planned.items())
                       for r, (planned, _) in zip(self.ranks, self.rank_plans(), strict=True))
        return all(self.per_rank[k] == self.planned_per_rank[k] for k in STATE_KEYS)

    @property
    def collectives_exact(self) -> bool:
        if self.layout.pp > 1:
            return all(_same(r["collectives"], planned)
                       for r, (_, planned) in zip(self.ranks, self.rank_plans(), strict=True))
        return _same(self.collectives, self.plan.collectives)

    def to_json(self) -> dict[str, Any]:
        r, planned = self.rank0, self.planned_per_rank
        return {
            "backend": r["backend"], "world_size": r["world_size"], "device": r["device"],
            "config": self.cfg.resolved(), "small_copy": self.small, "left_out": list(self.left_out),
            "layout": layout_json(self.layout),
            "per_rank": self.per_rank,
            "comm_bytes_per_step": self.comm_bytes,
            "collectives": self.collectives,
            # wall time of the measured step on these ranks, recording included: not the plan's GPU figure
            "step_time_s": max(a["step_s"] for a in self.ranks),
            "plan": {"per_rank": planned, "comm_bytes_per_step": by_key(self.planned_collectives)},
            "ratio": {k: (v / planned[k] if planned[k] else None) for k, v in self.per_rank.items()},
            "states_exact": self.states_exact, "collectives_exact": self.collectives_exact,
            "ranks": [{k: a[k] for k in (*STATE_KEYS, "activation_bytes", "peak_bytes", "first_loss", "step_s")}
                      for a in self.ranks],
            "peak_method": r["peak_method"],
        }


def _same(measured_calls: list[dict], planned_calls) -> bool:
    """Each planned collective's payload and calls (None: PyTorch chooses) equal to the measured one's."""
    measured = {(c["cause"], c["op"]): (c["payload_bytes"], c["calls"]) for c in measured_calls}
    planned = {(c.cause, c.op): (c.payload_bytes, c.calls) for c in planned_calls}
    return measured.keys() == planned.keys() and all(
        measured[k][0] == p[0] and (p[1] is None or measured[k][1] == p[1]) for k, p in planned.items())


def stage_plans(cfg: ModelConfig, layout: Layout) -> list[tuple[dict[str, int], list]]:
    """Per pipeline rank: (its model-state bytes, its collectives), from the plan's own arithmetic."""
    from tfcalc.count.training.comm import step_collectives
    from tfcalc.count.training.rank_memory import model_states

    out = []
    for stage in range(layout.pp):
        psi, w, g, o = model_states(cfg, layout, stage)
        out.append(({"weights_bytes": w, "grads_bytes": g, "optimizer_bytes": o},
                    step_collectives(cfg, layout, stage, psi)))
    return out


def layout_json(layout: Layout) -> dict[str, Any]:
    return {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp, "zero": layout.zero, "recompute": layout.recompute,
            "sequence_parallel": layout.sequence_parallel, "micro_batch": layout.micro_batch,
            "global_batch": layout.global_batch, "micro_batches": layout.micro_batches, "seq": layout.seq,
            "dtype": layout.dtype, "gpus": layout.gpus, "attention": layout.attention, "dropout": layout.dropout,
            # issue 20, sharding and precision (tfcalc.count.training.sharding)
            "ep": layout.ep, "etp": layout.etp, "ep_dispatch": layout.ep_dispatch,
            "compute_dtype": layout.compute_dtype, "fp8_recipe": layout.fp8_recipe,
            "fp8_all_gather": layout.fp8_all_gather,
            "reshard_after_forward": layout.reshard_after_forward, "hsdp": layout.hsdp, "grad_dtype": layout.grad_dtype,
            "zero_engine": layout.zero_engine,
            "offload": [w for w, on in (("optimizer", layout.offload_optimizer),
                                        ("activations", layout.offload_activations)) if on],
            # issue 20, pipeline and context
            "schedule": layout.schedule, "virtual_stages": layout.virtual_stages, "overlap": list(layout.overlap),
            "cp": layout.cp, "pp_split_counts": list(layout.pp_split_counts), "kernels": layout.kernels,
            "rope": layout.rope,
            "pp_layers": list(layout.pp_layers)}


def _left_out(planned: Layout, ran: Layout) -> tuple[str, ...]:
    out = []
    if planned.pp > 1 and ran.pp == 1:
        out.append(f"pipeline parallelism (pp {planned.pp})")
    if planned.pp > 1 and planned.pp != ran.pp:
        out.append(f"pp {planned.pp} (ran pp {ran.pp}, one stage a rank)")
    if planned.pp > 1 and planned.dp != ran.dp and ran.pp > 1:
        why = "a pipeline on fewer than 4 ranks runs alone" if ran.dp == 1 else "the replicas' gradients all-reduced"
        out.append(f"dp {planned.dp} (ran dp {ran.dp}: {why})")
    if planned.pp_layers and planned.pp_layers != ran.pp_layers:
        out.append(f"the stage split {','.join(map(str, planned.pp_layers))} (ran the even split)")
    if planned.pp_split_counts and not ran.pp_split_counts:
        out.append(f"{' and '.join(planned.pp_split_counts)} counted as blocks (ran DualPipeV's own cut)")
    if planned.schedule == "dualpipe" and ran.schedule == "dualpipev":
        out.append("dualpipe's two copies of the parameters (ran dualpipev, PyTorch's ScheduleDualPipeV: DualPipe cut "
                   "in half, 2 × pp stages in a V, one copy; the plan beside it is DualPipeV's)")
    elif planned.schedule != ran.schedule:
        out.append(f"the {planned.schedule} schedule (ran {ran.schedule})")
    if planned.recompute != "none":
        out.append(f"{planned.recompute} recompute")
    if planned.optimizer != ran.optimizer:
        out.append(f"{planned.optimizer} (ran {ran.optimizer}: Muon's whole-matrix step is measured on DDP without TP "
                   "or a pipeline)")
    if planned.tp != ran.tp:
        out.append(f"tp {planned.tp} (ran tp {ran.tp})")
    if planned.zero == 1 and ran.zero_engine == "torch":
        out.append("ZeRO-1's flat buffers (ran PyTorch's ZeroRedundancyOptimizer: DDP's all-reduce, whole tensors' "
                   "states dealt out, a broadcast per rank; planned as such)")
    if planned.zero == 2 and ran.zero == 3:
        out.append("ZeRO-2 (ran as FSDP2 without resharding after forward: PyTorch has no ZeRO-2 engine; weights "
                   "sharded between steps, gathered once per micro-batch)")
    elif planned.zero != ran.zero:
        out.append(f"ZeRO-{planned.zero} (ran " + ("plain data parallelism beside the pipeline)" if ran.dp > 1
                                                 else "dp 1)"))
    for what, gone in (("FP8 matmuls", planned.compute_dtype and not ran.compute_dtype),
                       ("an fp32 gradient buffer (the run is fp32)", planned.grad_dtype and not ran.grad_dtype),
                       ("optimizer offload", planned.offload_optimizer),
                       ("activation offload", planned.offload_activations),
                       (f"ep {planned.ep} (ran ep {ran.ep})", planned.ep != ran.ep),
                       ("DeepEP's dispatch (ran one all-to-all copy per token and expert)",
                        planned.ep > 1 and planned.ep_dispatch == "deepep"),
                       (f"HSDP {planned.hsdp} (ran plain FSDP: HSDP needs --nproc a multiple of {planned.hsdp} and "
                        "more)", planned.hsdp and not ran.hsdp)):
        if gone:
            out.append(what)
    if planned.attention != ran.attention:
        out.append(f"{planned.attention} attention (ran the module's {ran.attention})")
    return tuple(out)


def small_blocks(ran: Layout, kinds: int = 1) -> int:
    """Blocks of a small copy: at least 2, at least one of each of the model's ``kinds`` of layer (its
    distinct blocks), and with the ends counted (--pp-split-counts) dividing over the pp × V chunks (a
    pipeline's), as tfcalc.count.training.layout_pipeline requires."""
    chunks, counted = ran.pp * (2 if ran.schedule == "dualpipev" else ran.virtual_stages), len(ran.pp_split_counts)
    n = max(2, kinds, chunks - counted)  # without ends counted: pp × V, one block a chunk
    while (n + counted) % chunks:
        n += 1
    return n


def measured_run(cfg: ModelConfig, layout: Layout, nproc: int) -> tuple[ModelConfig, Layout, bool]:
    """(the config the ranks run, the layout they run, whether the config is a small copy): steps 1, 2
    and 4 of the module docstring, checked as runnable (one InputError line otherwise); no rank started."""
    from tfcalc.measure.parallelize import check_measurable
    from tfcalc.measure.pipeline import check_pipeline_measurable

    if layout.cp > 1:
        raise InputError(_CP_NOT_RUN)
    ran = measured_layout(layout, nproc)
    small = param_total(cfg) > MEASURE_PARAMS
    kinds = max(len(s.kinds()) for s in cfg.architecture.stacks)
    run_cfg = small_copy(cfg, ran.tp, small_blocks(ran, kinds)) if small else cfg
    if small and ran.pp_layers:  # the small copy's blocks divide evenly (small_blocks)
        ran = dataclasses.replace(ran, pp_layers=())
    if not small and ran.seq > run_cfg.max_seq_len:
        ran = dataclasses.replace(ran, seq=run_cfg.max_seq_len)
    # the ranks run the module's own attention kernel: the plan of the run assumes the same
    ran = dataclasses.replace(ran, attention=default_attention(run_cfg))
    if ran.pp > 1:
        check_pipeline_measurable(run_cfg, ran, nproc)
        check_layout(run_cfg, ran)
    else:
        check_measurable(run_cfg, ran)
    return run_cfg, ran, small


def check_plan(cfg: ModelConfig, layout: Layout, nproc: int, hw: Hardware, utilization: float,
               device: str | None = None, on_status=None) -> PlanCheck:
    """Run the layout on nproc local ranks and return it beside its plan (see the module docstring);
    on_status: see tfcalc.measure.launch.launch."""
    from tfcalc.measure.fit import require_ranks_fit
    from tfcalc.measure.launch import check_nproc, launch, ranks_device

    check_nproc(nproc, device)
    device = ranks_device(nproc, device)  # fewer GPUs than ranks: gloo on the CPU, and the fit check there
    run_cfg, ran, small = measured_run(cfg, layout, nproc)
    plan = make_plan(run_cfg, ran, hw, utilization)
    job = {"config": dataclasses.asdict(run_cfg), "layout": dataclasses.asdict(ran)}
    require_ranks_fit(run_cfg, ran, nproc, device, f"the plan of {cfg.name}")  # before any rank starts
    (ranks,) = launch([job], nproc, device=device, on_status=on_status)
    return PlanCheck(run_cfg, small, ran, plan, tuple(ranks), _left_out(layout, ran))
