"""The report of `tfcalc infer` (built by tfcalc.report.infer) and its JSON: one object per batch size (a
list for several), with the context, the top-level figures, ``predicted``, and the serving modes' objects
``tensor_parallel`` (--tp), ``speculative`` (--draft) and ``continuous`` (--rate). Conventions:
tfcalc.count.serving.static, tfcalc.count.serving.roofline and README, "Serving estimates"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tfcalc import devices
from tfcalc.count.model.memory import kv_cache_expanded_bytes, state_split
from tfcalc.count.model.quant import WeightFormat, format_label, stored_mxfp4
from tfcalc.count.perf.hardware import device_constants
from tfcalc.count.serving import continuous, expert_parallel, serving_tp, speculative, static as serving
from tfcalc.count.serving.roofline import Ceilings, experts_touched
from tfcalc.report import continuous as continuous_report, disaggregated, infer_ep
from tfcalc.report.decode import predicted_json, rows_json
from tfcalc.report.display import Displayed
from tfcalc.report.infer_options import InferOptions
from tfcalc.report.model_ref import ModelRef
from tfcalc.report.serving_tp import reserved_bytes, tensor_parallel
from tfcalc.workload import Workload


@dataclass(frozen=True, repr=False)
class InferReport(Displayed):
    model: ModelRef
    options: InferOptions
    seq: int
    src_seq: Optional[int]
    fmt: WeightFormat
    kv_dtype: str
    spec: Optional[devices.DeviceSpec]  # the datasheet device (None for a measured device tfcalc does not know)
    ceilings: Ceilings
    estimates: tuple[serving.Estimate, ...]  # one per batch
    max_batch: Optional[int]  # None: no memory size known (a measured CPU)
    compute_bound_batch: Optional[int]
    weight_matmuls_compute_bound_batch: Optional[int]
    measured: Optional[tuple[dict[str, Any], ...]] = None  # measured_json per batch
    device: Optional[str] = None  # the measured device, as torch writes it
    device_name: Optional[str] = None
    draft: Optional[ModelRef] = None  # --draft: the draft model and, per batch, the speculative round
    speculative: Optional[tuple[speculative.Speculative, ...]] = None
    continuous: Optional[continuous.SteadyState] = None  # --rate: the steady state (report.continuous)
    disaggregated: Optional[Any] = None  # --disaggregate P:D (report.disaggregated)
    tp_measured: Optional[dict[str, Any]] = None  # --measure --tp: the collectives on T ranks (report.serving_tp)
    speculative_measured: Optional[dict[str, Any]] = None  # --measure --draft: the rounds run (speculative_measured)
    continuous_measured: Optional[dict[str, Any]] = None  # --measure --rate: the server run (continuous_measured)
    # per batch, the same request priced at the keys tfcalc's runtime reads (its bucket): predicted.*_read
    read_estimates: Optional[tuple[serving.Estimate, ...]] = None
    # --ep: the layout and, per batch, the terms beside the estimate (tfcalc.report.infer_ep); estimates one GPU's
    ep_layout: Optional[expert_parallel.ExpertLayout] = None
    ep_terms: Optional[tuple[expert_parallel.Terms, ...]] = None
    ep_measured: Optional[dict[str, Any]] = None  # --measure --ep: the run on E gloo ranks (report.infer_ep.measure)

    def headline(self) -> str:
        from tfcalc import units

        data = self.to_json()
        rows = data if isinstance(data, list) else [data]
        each = ", ".join(f"batch {r['batch']:,} {units.tokens_rate(r['decode_tokens_per_s_total'])}"
                         + ("" if r["fits"] is not False else " (does not fit)") for r in rows)
        where = rows[0]["device"] if self.gpus == 1 else f"{self.gpus} × {rows[0]['device']}"
        line = f"{self.model.label} on {where}, prompt {self.seq:,}: decode {each}"
        steady = rows[0]["continuous"]
        if steady is not None:
            line += (f"; at {steady['rate_per_s']:g} requests/s over capacity ({steady['limit']})"
                     if steady["over_capacity"] else f"; at {steady['rate_per_s']:g} requests/s TTFT "
                     f"{units.seconds(steady['ttft_s'])}, {units.seconds(steady['itl_s'] or 0)} between tokens")
        spec = rows[0]["speculative"]
        if spec is not None:
            line += f"; with draft {spec['draft_label']}: speedup {spec['speedup']:.2f}×"
        return line

    def row_json(self, i: int) -> dict[str, Any]:
        est, c = self.estimates[i], self.ceilings
        predicted = predicted_json(est, c)
        if self.read_estimates:  # tfcalc's runtime reads a bucket of its cache: those figures beside the live ones
            read = self.read_estimates[i]
            predicted.update(decode_s_per_token_read=read.decode_s_per_token, bytes_per_token_read=read.bytes_per_token)
        top = self.measured[i] if self.measured else {k: predicted[k] for k in (
            "prefill_s", "decode_s_per_token", "decode_tokens_per_s", "decode_tokens_per_s_total",
            "bytes_per_token", "bound")} | {"bandwidth_ceiling_bytes_per_s": None, "predicted": predicted}
        return {
            "preset": self.model.cfg.name, "label": self.model.label, "batch": est.batch, "seq": self.seq,
            "gen": self.options.gen, "src_seq": self.src_seq,
            # --cached-prefix N: the tokens asked and those that hit, whole blocks (count/serving/prefix.py)
            "cached_prefix": self.options.cached_prefix or 0,
            "cached_tokens": est.prefill.context - est.prefill.queries,
            "dtype": self.fmt.dtype, "weight_format": {"dtype": self.fmt.dtype, "group_size": self.fmt.group_size,
                                                       "zero_point": self.fmt.zero_point, "label": self.weight_label,
                                                       "experts": "mxfp4" if stored_mxfp4(self.model.cfg, self.fmt)
                                                       else None},
            "experts_read": self.experts_read(est.batch),
            "kv_dtype": self.kv_dtype, "compute_dtype": self.fmt.compute_dtype,
            # the prediction's launch mode: "graph" (steps captured, no host term) or "eager" (the host's
            # launches, tfcalc.count.perf.inference step 6); None: the plain roofline of measured ceilings
            "launch": predicted["launch"],
            "device_spec": None if self.spec is None else self.spec.key,
            "device": self.device or (self.spec.key if self.spec else None),
            "device_name": self.device_name or (self.spec.name if self.spec else None),
            "measured": self.measured is not None,
            "ceilings": {"flops_per_s": c.flops_per_s, "bytes_per_s": c.bytes_per_s, "ridge_flops_per_byte": c.ridge,
                         "source": c.source,
                         # FP8 weights: the 16-bit peak attention and the LM head run at (count.perf.fp8_time)
                         "high_precision_flops_per_s": c.high_flops_per_s,
                         # each per-device constant of the performance model: its value and where it came from
                         "device_constants": device_constants(c.perf)},
            "weights_bytes": est.weight_bytes, "kv_cache_bytes": est.kv_cache_bytes, "fits": est.fits,
            # latent attention: the cache of expanded K and V heads beside the latent one (memory's key too)
            "kv_cache_expanded_bytes": kv_cache_expanded_bytes(self.model.cfg, Workload(
                batch=est.batch, seq=self.seq, gen=self.options.gen, kv_dtype=self.kv_dtype, src_seq=self.src_seq)),
            "generation_state": self.state_json(est),
            # the form a decode step is counted (and tfcalc's module run) in: latent attention's absorbed one
            "decode_attention_form": self.model.cfg.architecture.decode_forms(),
            "memory_bytes": None if self.spec is None else devices.usable_bytes(self.spec, communicating=self.gpus > 1),
            "datasheet_memory_bytes": None if self.spec is None else self.spec.memory_bytes,
            "driver_memory_bytes": None if self.spec is None else devices.driver_bytes(self.spec),
            "runtime_reserved_bytes": None if self.spec is None else reserved_bytes(self.spec, self.gpus),
            "tp": self.tp, "tensor_parallel": self.tp_json(est),
            "ep": self.options.ep, "expert_parallel": self.ep_json(i),
            "speculative": self.speculative_json(i),
            "continuous": continuous_report.to_json(self.continuous, self.continuous_measured),
            "disaggregated": disaggregated.to_json(self.disaggregated),
            "max_batch": self.max_batch, "compute_bound_batch": self.compute_bound_batch,
            "weight_matmuls_compute_bound_batch": self.weight_matmuls_compute_bound_batch,
            "total_s": est.total_s, "beyond_context": self.beyond_context,
            **top,
            "roofline": {"prefill": rows_json(est.prefill, c),
                         "first_decode_step": rows_json(est.first_decode_step, c) if est.first_decode_step else None},
        }

    def state_json(self, est: serving.Estimate) -> dict[str, Any]:
        """The state at seq + gen positions split (tfcalc.count.model.memory.StateSplit, the whole model's, not
        one GPU's), and what the first decode step writes of the fixed state (roofline's row "state_write", one
        GPU's under TP): a fixed tensor is read whole and written whole every step (mixer.step_io), so it is
        also what the step reads of it."""
        split = state_split(self.model.cfg, Workload(batch=est.batch, seq=self.seq, gen=self.options.gen,
                                                     dtype=self.fmt.dtype, kv_dtype=self.kv_dtype))
        step = est.first_decode_step
        written = 0 if step is None else sum(r.kv_bytes for r in step.rows if r.component == "state_write")
        return {"kv_growing_bytes": split.growing, "fixed_state_bytes": split.fixed, "kv_layers": split.growing_layers,
                "layers": split.layers, "fixed_state": {n: {"dtype": d, "bytes": b}
                                                       for n, (d, b) in split.fixed_parts.items()},
                "decode_step_fixed_state_read_bytes": written, "decode_step_fixed_state_written_bytes": written}

    @property
    def tp(self) -> int:
        return self.options.tp

    def ep_json(self, i: int) -> Optional[dict[str, Any]]:
        """--ep: the layout and its terms at batch i, one GPU's (report.infer_ep), and a measured run; None without."""
        if self.ep_layout is None:
            return None
        x = infer_ep.to_json(self.ep_layout, self.model.cfg, self.estimates[i], self.ep_terms[i])
        return x | {"measured": self.ep_measured if i == 0 else None}

    @property
    def gpus(self) -> int:
        """GPUs serving one copy of the model: T under --tp, E under --ep (attention TP T × DP D = E)."""
        return self.ep_layout.ep if self.ep_layout is not None else self.tp

    def tp_json(self, est: serving.Estimate) -> Optional[dict[str, Any]]:
        """Tensor-parallel serving: the split and the step's all-reduces (count.serving.serving_tp); None at T = 1.
        weights_bytes, kv_cache_bytes and fits are then one GPU's."""
        if self.tp == 1 or self.ep_layout is not None:  # under --ep: expert_parallel's attention_tp and terms
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

    def speculative_json(self, i: int) -> Optional[dict[str, Any]]:
        """--draft: the round of tfcalc.count.serving.speculative at this batch; None without a draft."""
        if self.speculative is None or self.draft is None:
            return None
        s, est = self.speculative[i], self.estimates[i]
        need = est.weight_bytes + s.kv_cache_bytes + s.draft_weights_bytes + s.draft_kv_cache_bytes
        memory = None if self.spec is None else devices.usable_bytes(self.spec, communicating=self.tp > 1)
        return {"draft": self.draft.cfg.name, "draft_label": self.draft.label, "draft_tokens": s.draft_tokens,
                "accept_rate": s.accept_rate, "expected_tokens_per_step": s.expected_tokens, "context": s.context,
                "target_step_s": s.target_step_s, "draft_step_s": s.draft_step_s, "verify_step_s": s.verify_step_s,
                "round_s": s.round_s, "decode_s_per_token": s.decode_s_per_token,
                "decode_tokens_per_s": 1 / s.decode_s_per_token,
                "decode_tokens_per_s_total": est.batch / s.decode_s_per_token, "speedup": s.speedup,
                "draft_weights_bytes": s.draft_weights_bytes, "draft_kv_cache_bytes": s.draft_kv_cache_bytes,
                "kv_cache_bytes": s.kv_cache_bytes, "ring_spare_slots": s.draft_tokens,
                "fits": None if memory is None else need <= memory,
                "formula": "tokens per target step (1 − A^(k+1)) / (1 − A) (Leviathan et al. 2023, eq. 1)",
                "measured": self.speculative_measured if i == 0 else None}

    @property
    def tp_link(self) -> serving_tp.TensorParallel:
        return tensor_parallel(self.spec, self.ceilings, self.tp)

    @property
    def weight_label(self) -> str:
        """The weights' format, with the routed experts' stored format where it applies (MXFP4)."""
        return format_label(self.model.cfg, self.fmt)

    def experts_read(self, batch: int) -> Optional[dict[str, Any]]:
        """A mixture of experts: the experts per layer whose weights a decode step and the prefill read at
        this batch, the expected distinct experts B (or B·T) tokens routed uniformly to k of E touch,
        E·(1 − (1 − k/E)^tokens) (tfcalc.count.serving.roofline.experts_touched); None for a dense model."""
        moe = next((b.ffn for _, b, _ in self.model.cfg.architecture.kinds() if b.is_moe), None)
        if moe is None:
            return None
        E, k = moe.n_expert, moe.top_k
        return {"n_expert": E, "top_k": k, "decode_per_layer": experts_touched(E, k, batch),
                "prefill_per_layer": experts_touched(E, k, batch * self.seq),
                "assumption": "uniform routing: E·(1 − (1 − k/E)^tokens) distinct experts per layer"}

    @property
    def beyond_context(self) -> bool:
        """The generation runs past the positions the model can encode: arithmetic only."""
        cfg = self.model.cfg
        return cfg.architecture.bounded_positions and self.seq + self.options.gen > cfg.max_seq_len

    def to_json(self) -> Any:
        rows = [self.row_json(i) for i in range(len(self.estimates))]
        return rows[0] if len(rows) == 1 else rows
