"""The report of `tfcalc plan`: a parallel training layout's memory per rank, collectives per step, step
time and training time on a device from the datasheet table; the layouts that fit when none is given;
and, with --measure, the plan checked on a real distributed run (tfcalc.report.plan_check).

Defaults, each stated in --help: the device h100-sxm; the step time from the performance model
(tfcalc.count.perf: matmul efficiency from each GEMM's shape, achievable bandwidth, kernel costs, α-β
collectives and their overlap), or, given --mfu X, the step time at which the end-to-end MFU is X;
4M tokens per step (2²² / seq sequences, Llama 2's batch, Touvron et al. 2023, sec. 2.2);
micro-batch 1; seq the model's context; bf16 with mixed-precision Adam. No layout given: a search over
the GPUs (--gpus N), or over the fewest GPUs that fit (--gpus auto, the default without a layout).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from tfcalc import devices
from tfcalc.count.model.lora import for_model as lora_for_model
from tfcalc.count.model.params import total as param_total
from tfcalc.count.model.training_memory import check_training_dtype
from tfcalc.count.perf import expert_imbalance
from tfcalc.count.perf.fp8_recipes import NARROW, narrow
from tfcalc.count.perf.fp8_time import fp8_peak_share
from tfcalc.count.perf.hardware import constants_line, device_perf, fp8_ceiling_note, from_table, perf_json
from tfcalc.count.training import experts_folded, lora_plan
from tfcalc.count.training.experts_folded import folded, rank_tokens, resolve_fold
from tfcalc.count.training.layout import Layout, candidate_layouts, check_positions, default_kernels, resolve_degrees
from tfcalc.count.training.layout_pipeline import check_cp
from tfcalc.count.training.micro_batch_time import imbalance as training_imbalance, moe_step_s
from tfcalc.count.training.offload import host_link_bytes_per_s
from tfcalc.count.training.overlap_costs import capped_clock
from tfcalc.count.training.plan import Plan, fewest_gpus, make_plan, muon_json, pipeline_stages, search
from tfcalc.count.training.search_space import cp_applies, cp_degrees, offload_words
from tfcalc.count.training.sharding import check_model_variants, check_sharding, dispatcher, ep_nodes
from tfcalc.count.training.steptime import Hardware, TrainingRun, training_run
from tfcalc.errors import InputError, shown
from tfcalc.report.display import Displayed
from tfcalc.report.model_ref import ModelRef
from tfcalc.report.plan_check import PlanCheck, check_plan, layout_json
from tfcalc.report.plan_request import PlanRequest, check_request
from tfcalc.report.plan_schedule import search_space
from tfcalc.report.plan_search import offloaded_words, search_json, search_notes
from tfcalc.workload import check_size

DEFAULT_DEVICE_SPEC = "h100-sxm"
TOKENS_PER_STEP = 2**22


@dataclass(frozen=True, repr=False)
class PlanReport(Displayed):
    model: ModelRef
    device: devices.DeviceSpec
    request: PlanRequest
    plan: Plan  # the layout asked for, or the fastest that fits
    candidates: tuple[Plan, ...]  # the search's layouts that fit, fastest first (empty without a search)
    search: Optional[str]  # None, 'layouts' (of --gpus N) or 'gpus' (the fewest that fit)
    training: Optional[TrainingRun]
    measured: Optional[PlanCheck] = None

    def headline(self) -> str:
        from tfcalc import units

        L, m = self.plan.layout, self.plan.memory
        verdict = "fits" if self.plan.fits else "does not fit"
        return (f"{self.model.label}: tp {L.tp} · pp {L.pp} · dp {L.dp} · ZeRO-{L.zero}, {L.gpus} × {self.device.key}: "
                f"{units.nbytes(m.total)} a rank ({verdict}), {units.seconds(self.plan.step.overlap_s)} a step")

    @property
    def params(self) -> int:
        return param_total(self.model.cfg)

    @property
    def notes(self) -> list[str]:
        """What the plan assumes beyond the layout, for this model."""
        out = []
        if self.model.cfg.architecture.has_moe and folded(self.plan.layout):
            L = self.plan.layout
            out.append(f"experts folded over tp × cp × dp = {L.tp * L.cp * L.dp} ranks (MoE Parallel Folding): "
                       f"{experts_folded.describe(L)}; each rank holds {f'1/{L.ep}' if L.ep > 1 else 'all'} of "
                       "every mixture's routed experts"
                       f"{f', each split {L.etp} ways,' if L.etp > 1 else ''} and routes its own {rank_tokens(L):,} "
                       "tokens a micro-batch"
                       + (f"; {ep_dispatch_words(L, self.device.gpus_per_node)}" if L.ep > 1 else "")
                       + " (tfcalc.count.training.experts_folded)")
        elif self.model.cfg.architecture.has_moe and self.plan.layout.ep > 1:
            out.append(f"expert parallel over {self.plan.layout.ep} ranks of the data-parallel group: each holds "
                       f"1/{self.plan.layout.ep} of every mixture's routed experts, replicated over dp / ep = "
                       f"{self.plan.layout.dp // self.plan.layout.ep}; tokens travel by all-to-all, "
                       f"{ep_dispatch_words(self.plan.layout, self.device.gpus_per_node)} (tfcalc.count."
                       "experts_parallel); under TP each rank holds its experts whole")
        elif self.model.cfg.architecture.has_moe:
            out.append("experts are replicated: each TP and DP rank holds every expert whole (no expert "
                       "parallelism); only attention and dense FFNs are split under TP")
        if self.model.cfg.arch == "encoder-decoder":
            out.append("encoder-decoder: the encoder's and decoder's blocks are planned together, with pp 1 (under TP "
                       "cross-attention splits as self-attention does), as many source tokens as target tokens")
        if not from_table(self.hardware.perf):  # a device file: which constants it stated, inherited, defaulted
            out.append(constants_line(self.hardware.perf))
        out += lora_plan.lora_notes(self.model.cfg, self.request.lora)
        return out + sharding_notes(self.plan.layout, self.device) + search_notes(self)

    @property
    def hardware(self) -> Hardware:
        return hardware(self.device, self.plan.layout.dtype, self.request.matmul_efficiency,
                        self.request.bandwidth_efficiency, self.request.power_limit)

    @property
    def physics_mfu(self) -> float:
        st = self.plan.step
        return st.model_flops / (st.physics_s * self.hardware.peak_flops_per_s * self.plan.layout.gpus)

    @property
    def expert_imbalance(self) -> float:
        """The fullest EP rank's routed rows over the mean, its expert GEMMs' factor (count.perf.expert_imbalance)."""
        return training_imbalance(self.model.cfg, self.plan.layout)

    @property
    def moe_dispatch_s(self) -> float:
        """Of the compute: the MoE layers' router top-k, index work and permutes (count.perf.moe_dispatch)."""
        hw = self.hardware
        return moe_step_s(self.model.cfg, self.plan.layout, hw.bandwidth_bytes_per_s * hw.perf.bandwidth_efficiency,
                          hw.perf)

    @property
    def mfu_fp8_peak(self) -> Optional[float]:
        """Under --compute-dtype fp8: model FLOPs over the FP8 peak (None otherwise)."""
        fp8 = self.hardware.fp8_peak_flops_per_s
        if self.plan.layout.compute_dtype != "fp8" or not fp8:
            return None
        return fp8_peak_share(self.plan.step.model_flops, self.plan.step.overlap_s, fp8, self.plan.layout.gpus)

    @property
    def tokens_per_s(self) -> float:
        L = self.plan.layout
        return L.global_batch * L.seq / self.plan.step.overlap_s

    def to_json(self) -> dict[str, Any]:
        p, m, st, L = self.plan, self.plan.memory, self.plan.step, self.plan.layout
        return {
            "preset": self.model.cfg.name, "label": self.model.label, "overrides": list(self.model.overrides),
            "params": self.params, "device_spec": self.device.key, "device_name": self.device.name,
            "device_memory_bytes": self.device.memory_bytes, "gpus": L.gpus,
            "device_usable_bytes": p.memory_limit, "device_driver_bytes": devices.driver_bytes(self.device),
            "runtime_reserved_bytes": {"cuda_context": devices.CUDA_CONTEXT_BYTES,
                                       "communication_buffers": devices.COMM_BUFFER_BYTES},
            # the link between a node's GPUs by its kind (nvlink, pcie) and as the table names it (issue 20, G)
            "intra_link": devices.intra_link(self.device), "intra_link_name": devices.intra_link_name(self.device),
            "layout": layout_json(L),
            "per_rank": {"weights_bytes": m.weights, "grads_bytes": m.grads, "optimizer_bytes": m.optimizer,
                         "activation_bytes": m.activations, "gathered_weights_bytes": m.gathered,
                         "total_bytes": m.total, "params": m.params, "pipeline_stage": m.stage,
                         "fp8_cache_bytes": m.fp8_cache, "host_bytes": m.host,
                         # ZeRO-3 under a pipeline: unsharded gradients (tfcalc.count.training.pipeline_fsdp)
                         "accumulated_grads_bytes": m.accumulated_grads},
            # offload's host memory, per node (tfcalc.count.training.plan.host_fits); fits holds both it and the GPU's
            "host": {"bytes_per_node": p.host_per_node, "ranks_per_node": p.ranks_per_node,
                     "node_bytes": p.host_limit, "fits": p.host_fits,
                     "source": self.device.host_memory_source or None},
            "fits": p.fits, "notes": self.notes,
            "comm_bytes_per_step": p.comm_bytes,
            "collectives": [dict(dataclasses.asdict(c), sent_bytes=c.sent_bytes) for c in p.collectives],
            "step_time_s": st.overlap_s,
            "step": {"model_flops": st.model_flops, "executed_flops": st.executed_flops, "compute_s": st.compute_s,
                     "bubble": st.bubble, "pipelined_s": st.pipelined_s, "comm_s": st.comm_s,
                     "no_overlap_s": st.no_overlap_s, "overlap_s": st.overlap_s, "utilization": self.request.mfu,
                     "mfu": st.mfu, "physics_s": st.physics_s, "physics_mfu": self.physics_mfu,
                     "basis": st.basis, "exposed_comm_s": st.exposed_s, "matmul_s": st.matmul_s,
                     # MFU's peak: the --dtype one, also under FP8 matmuls (torchtitan's convention); the FP8
                     # peak's share beside it (tfcalc.count.perf.fp8_time, step 4)
                     "mfu_peak_dtype": L.dtype, "mfu_fp8_peak": self.mfu_fp8_peak,
                     "contention_s": st.contention_s,  # overlap's cost: NCCL's SMs (count.training.steptime, 5)
                     # ... its HBM traffic, and FSDP2's copies on the compute stream (count.training.overlap_costs)
                     "hbm_contention_s": st.hbm_contention_s, "fsdp_copy_s": st.fsdp_copy_s,
                     # --overlap ep's cost: the all-to-alls' SMs (count.training.experts_parallel, 4)
                     "ep_contention_s": st.ep_contention_s,
                     "slowest_rank_s": st.slowest_rank_s,  # the slowest GPU's matmuls (count.perf.slowest_rank)
                     "power_limit_w": self.request.power_limit,  # its clock: perf.sustained_clock
                     "moe_dispatch_s": self.moe_dispatch_s,  # of compute_s: count.perf.moe_dispatch
                     # the fullest EP rank's expert GEMMs over the mean's (count.perf.expert_imbalance)
                     "expert_imbalance": self.expert_imbalance,
                     "optimizer_s": st.optimizer_s,  # Adam on the rank's shard (count.perf.optimizer); or Muon's:
                     "optimizer": L.optimizer, "muon": muon_json(self.model.cfg, p, self.hardware),
                     "matmul_efficiency": self.request.matmul_efficiency,
                     "perf": perf_json(self.hardware.perf)},
            # each stage's blocks, one micro-batch's seconds and memory (--pp-layers; count.training.plan)
            "pipeline_stages": pipeline_stages(self.model.cfg, L, self.hardware) if L.pp > 1 else [],
            "tokens_per_s": self.tokens_per_s,
            "training": None if self.training is None else dataclasses.asdict(self.training),
            "search": None if self.search is None else {
                "kind": self.search, "fitting": len(self.candidates), **search_json(self),
                "layouts": [{"layout": layout_json(c.layout), "total_bytes": c.memory.total,
                             "step_time_s": c.step.overlap_s, "mfu": c.step.mfu}
                            for c in self.candidates[: self.request.top]]},
            "measured": None if self.measured is None else self.measured.to_json(),
            "lora": lora_plan.lora_json(self.model.cfg, self.request.lora),  # tfcalc.count.training.lora_plan
        }


def hardware(spec: devices.DeviceSpec, dtype: str, matmul_efficiency: Optional[float] = None,
             bandwidth_efficiency: Optional[float] = None, power_limit: Optional[float] = None) -> Hardware:
    peak = spec.peak(dtype)
    if peak is None:
        raise InputError(f"the {spec.key} datasheet gives no {dtype} rate; choose another --dtype")
    if not spec.intra_node_bytes_per_s or not spec.inter_node_bytes_per_s:
        raise InputError(f"the {spec.key} spec gives no interconnect bandwidth, which a parallel plan needs")
    perf = device_perf(spec, matmul_efficiency, bandwidth_efficiency)
    if power_limit is not None:  # --power-limit: the clock at that limit (count.training.overlap_costs)
        # a device file is rated as the table device it inherits from (devices.perf_basis), its static power too
        clock = capped_clock(power_limit, devices.perf_basis(spec) or spec.key, static_w=perf.static_power_w)
        perf = dataclasses.replace(perf, sustained_clock=perf.sustained_clock * clock)
    return Hardware(peak, devices.usable_bytes(spec), spec.intra_node_bytes_per_s, spec.inter_node_bytes_per_s,
                    spec.gpus_per_node, spec.bandwidth_bytes_per_s, devices.intra_link(spec), perf,
                    **more_hardware(spec))


def more_hardware(spec: devices.DeviceSpec) -> dict[str, Any]:
    """The rates the sharding and precision variants read (tfcalc.count.training.fp8, tfcalc.count.training.offload)."""
    return dict(fp8_peak_flops_per_s=spec.peak("fp8"), fp4_peak_flops_per_s=spec.peak("nvfp4"),
                pcie_bytes_per_s=host_link_bytes_per_s(spec),
                host_memory_bytes=spec.host_memory_bytes)


def _global_batch(request: PlanRequest, seq: int, dp: int) -> int:
    """Given, or 2²² tokens rounded up to a whole number of (dp × micro-batch) sequences."""
    if request.global_batch is not None:
        return check_size("--global-batch", request.global_batch)
    per = dp * request.micro
    return max(1, -(-(TOKENS_PER_STEP // seq) // per)) * per


def _base(request: PlanRequest, seq: int, global_batch: int) -> Layout:
    return Layout(tp=1, pp=1, dp=1, seq=seq, global_batch=global_batch, micro_batch=request.micro,
                  zero=request.zero or 0, recompute=request.recompute or "none",
                  sequence_parallel=request.sequence_parallel, dtype=request.dtype, attention=request.attention,
                  schedule=request.schedule or "1f1b", virtual_stages=request.virtual, overlap=tuple(request.overlap),
                  cp=request.cp or 1, pp_split_counts=tuple(request.pp_split_counts or ()), kernels=request.kernels,
                  rope=request.rope, pp_layers=request.pp_layers or (), dropout=request.dropout,
                  zero_engine=request.zero_engine, optimizer=request.optimizer,
                  **sharding_fields(request))


def sharding_fields(request: PlanRequest) -> dict[str, Any]:
    """The Layout fields of tfcalc.count.training.sharding, from the request (ep 1 unless given)."""
    r = request
    compute_dtype, fp8_recipe = narrow(r.compute_dtype, r.fp8_recipe)  # --compute-dtype mxfp8|nvfp4: a recipe
    return dict(ep=1 if r.ep is None else r.ep, etp=r.etp, ep_dispatch=r.ep_dispatch,
                expert_imbalance=expert_imbalance.parse(r.expert_imbalance), compute_dtype=compute_dtype,
                fp8_recipe=fp8_recipe, fp8_all_gather=r.fp8_all_gather,
                reshard_after_forward=r.reshard_after_forward, hsdp=r.hsdp, grad_dtype=r.grad_dtype,
                offload_optimizer="optimizer" in r.offload, offload_activations="activations" in r.offload)


def _searched(model: ModelRef, request: PlanRequest, hw: Hardware, seq: int,
              on_try=None) -> tuple[str, tuple[Plan, ...]]:
    cfg = model.cfg
    base = _base(request, seq, _global_batch(request, seq, 1) if request.global_batch is None else request.global_batch)
    only = dict(zero=request.zero, recompute=request.recompute, ep=request.ep, space=search_space(request))
    check_positions(cfg, seq)  # said once (rank_floor read it as "no tensor-parallel degree splits" the model)
    if base.cp > 1:  # what no tp or pp changes: said once, not as "no layout"
        check_cp(cfg, dataclasses.replace(base, sequence_parallel=False))
    if request.zero not in (None, 3) and (request.hsdp is not None or not request.reshard_after_forward):
        check_sharding(cfg, dataclasses.replace(base, dp=2 * (request.hsdp or 1)))  # its ZeRO-3 line, said once
    if request.hsdp is not None and (base.global_batch // base.micro_batch) % request.hsdp:
        raise InputError(f"--hsdp {request.hsdp} must divide dp, and dp the global batch ({base.global_batch}) / "
                         f"micro-batch ({base.micro_batch}): no dp does")
    if request.gpus in (None, "auto"):
        _, plans = fewest_gpus(cfg, base, hw, request.mfu, **only, on_try=on_try)
        return "gpus", tuple(plans)
    plans = search(cfg, check_size("--gpus", request.gpus), base, hw, request.mfu, **only)
    cps = tuple(cp_degrees(seq, request.gpus, only["space"], cp_applies(cfg, base.attention)))
    if not plans and next(candidate_layouts(cfg, request.gpus, base, hw.gpus_per_node, request.zero, request.recompute,
                                            ep=request.ep, cps=cps), None) is None:
        most = hw.gpus_per_node * cfg.n_layer * (base.global_batch // base.micro_batch)
        hint = (f"too many GPUs: tp (at most {hw.gpus_per_node} per node) × pp (at most {cfg.n_layer} blocks) × dp "
                f"(at most global batch / micro-batch = {base.global_batch // base.micro_batch}) is at most {most:,}; "
                "give fewer --gpus or a larger --global-batch") if request.gpus > most else (
                "tp must divide the heads and widths, pp the blocks, dp the global batch; try another --gpus")
        raise InputError(f"no layout of {request.gpus:,} GPUs splits {cfg.name} at global batch {base.global_batch}, "
                         f"micro-batch {base.micro_batch}: {hint}")
    if not plans:
        raise InputError(f"no layout of {request.gpus} GPUs fits {cfg.name} in {hw.memory_bytes / 1e9:g} GB per GPU "
                         f"at global batch {base.global_batch}, micro-batch {base.micro_batch}, seq {seq}"
                         + _offload_words(cfg, request.gpus, base, hw, request.mfu, only)
                         + "; try more --gpus, or --gpus auto")
    return "layouts", tuple(plans)


def _offload_words(cfg, gpus: int, base: Layout, hw: Hardware, utilization, only: dict) -> str:
    """Why offload did not rescue a search: with the node's host memory unchecked, the least a layout that
    fits the GPUs needs per node (tfcalc.count.training.plan.host_fits), or that none fits even so."""
    from tfcalc import units

    if not only["space"].offload:
        return ""
    unchecked = [] if hw.host_memory_bytes is None else search(
        cfg, gpus, base, dataclasses.replace(hw, host_memory_bytes=None), utilization, **only)
    if not unchecked:
        return offload_words(base)
    least = min(unchecked, key=lambda p: p.host_per_node)
    return (f" without offload; with {offloaded_words(least.layout)} offload it needs at least "
            f"{units.nbytes(least.host_per_node)} of host memory per node, more than the node's "
            f"{units.nbytes(hw.host_memory_bytes)}")


def build_plan(model: ModelRef, request: PlanRequest, device_spec: str = DEFAULT_DEVICE_SPEC,
               measure: bool = False, nproc: int = 2, measure_device: Optional[str] = None,
               on_status=None, on_try=None) -> PlanReport:
    """The plan report; ``on_status``: a measured run's rank statuses (tfcalc.measure.launch), ``on_try``:
    each GPU count a --gpus auto search tries (tfcalc.count.training.plan.fewest_gpus)."""
    cfg = model.cfg
    check_request(request)
    request = dataclasses.replace(request, kernels=request.kernels or default_kernels(cfg))  # the model's default
    check_size("--nproc", nproc)  # the ranks --measure would run: a count, measured or not (the API's nproc=0)
    if not isinstance(device_spec, str):
        raise InputError(f"--device-spec must be a table key or a file name; got {shown(device_spec)}")
    check_training_dtype(request.dtype)
    spec = devices.resolve(device_spec)
    hw = hardware(spec, request.dtype, request.matmul_efficiency, request.bandwidth_efficiency, request.power_limit)
    if request.compute_dtype in NARROW:  # what --compute-dtype mxfp8|nvfp4 means (count.perf.fp8_recipes)
        request = dataclasses.replace(request, compute_dtype="fp8", fp8_recipe=request.compute_dtype)
    if request.compute_dtype == "fp8" and request.fp8_recipe == "nvfp4" and not spec.peak("nvfp4"):
        raise InputError(f"--compute-dtype nvfp4: the {spec.key} datasheet gives no NVFP4 rate (FP4 tensor cores "
                         "arrived with Blackwell); choose another --device-spec")
    if request.compute_dtype == "fp8" and not hw.fp8_peak_flops_per_s:
        raise InputError(f"--compute-dtype fp8: the {spec.key} datasheet gives no FP8 rate (FP8 tensor cores "
                         "arrived with Hopper and Ada); choose another --device-spec")
    if request.compute_dtype == "fp8" and request.fp8_recipe == "mxfp8" and not spec.peak("mxfp8"):
        raise InputError(f"--fp8-recipe mxfp8: the {spec.key} datasheet gives no MX rate (block-scaled tensor cores "
                         "arrived with Blackwell); choose another recipe or --device-spec")
    check_size("--top", request.top)
    seq = check_size("--seq", request.seq) if request.seq is not None else cfg.max_seq_len
    check_model_variants(cfg, request.ep, request.recompute, request.attention)
    if request.lora is not None and (request.searching or measure):
        raise InputError("plan --lora-rank prices one layout: give --dp (--gpus alone searches), drop --measure")
    request = dataclasses.replace(request, lora=lora_for_model(cfg, request.lora))  # all-linear: the model's linears
    if request.searching:
        if measure:
            raise InputError("--measure checks one layout: give --tp, --pp or --dp (a search lists many)")
        kind, candidates = _searched(model, request, hw, seq, on_try)
        chosen = candidates[0]
    else:
        if request.gpus == "auto":
            raise InputError("--gpus auto searches for a layout: leave out --tp, --pp and --dp")
        gpus = None if request.gpus is None else check_size("--gpus", request.gpus)
        tp, pp, dp = resolve_degrees(gpus, request.tp, request.pp, request.dp, request.cp or 1)
        layout = dataclasses.replace(_base(request, seq, _global_batch(request, seq, dp)), tp=tp, pp=pp, dp=dp)
        layout = resolve_fold(cfg.architecture.has_moe, layout)  # --etp 1 implied (count.training.experts_folded)
        kind, candidates, chosen = None, (), make_plan(cfg, layout, hw, request.mfu, request.lora)
    training = None
    if request.tokens is not None:
        if request.tokens < 1:
            raise InputError(f"--tokens must be positive; got {request.tokens}")
        training = training_run(request.tokens, param_total(cfg), chosen.layout, chosen.step.overlap_s)
    measured = check_plan(cfg, chosen.layout, nproc, hw, request.mfu, measure_device, on_status) if measure else None
    return PlanReport(model, spec, request, chosen, candidates, kind, training, measured)


def ep_dispatch_words(L: Layout, gpus_per_node: int) -> str:
    """The dispatcher the plan prices (tfcalc.count.training.experts_parallel, step 3), in words."""
    nodes = ep_nodes(L, gpus_per_node)
    if dispatcher(L, nodes) == "deepep":
        return (f"DeepEP's hierarchical dispatch over {nodes} nodes (once per remote node over the network, "
                "forwarded over NVLink; node-limited by the router's groups)")
    return f"one copy per token and expert ({nodes} node{'s' if nodes > 1 else ''})"


RECIPE_WORDS = {"delayed": "Transformer Engine's delayed scaling", "tensorwise": "torchao's tensorwise dynamic scaling",
                "rowwise": "torchao's rowwise scaling",
                "rowwise_with_gw_hp": "torchao's rowwise scaling, the weight gradient in 16 bits",
                "mxfp8": "MXFP8, a scale per 32 elements",
                "nvfp4": "NVFP4, a scale per 16 elements and one per tensor, at the NVFP4 rate"}  # fp8_recipes


def sharding_notes(L: Layout, spec: devices.DeviceSpec) -> list[str]:
    """What the sharding and precision variants assume (tfcalc.count.training.fp8, tfcalc.count.training.offload)."""
    out = []
    if L.compute_dtype == "fp8":
        rate = "nvfp4" if L.fp8_recipe == "nvfp4" else "fp8"
        out.append(f"FP8: the blocks' linears at the {spec.key} {rate.upper()} peak "
                   f"({spec.peak(rate) / 1e12:,.0f} TFLOP/s, "
                   f"{RECIPE_WORDS[L.fp8_recipe]}) under the FP8 GEMM ceiling "
                   f"({fp8_ceiling_note(spec.key, device_perf(spec))}), "
                   "their inputs cast to FP8 row-major and transposed (memory-bound kernels); attention, router and "
                   f"LM head in {L.dtype}; MFU stays against the {L.dtype} peak (torchtitan's convention), the FP8 "
                   f"peak's share printed beside it; activations counted in {L.dtype} (TE saves "
                   "FP8 casts of the linears' inputs: an overestimate)")
    if L.offload_optimizer:
        out.append("optimizer offload: the PCIe copies (gradient shard down, weights up) are not overlapped; the "
                   "CPU's Adam step is not timed")
    if L.offload_activations:
        out.append("activation offload: copies overlapped with the compute, two blocks' activations kept on the "
                   "GPU (the running one and the one in transfer)")
    return out

