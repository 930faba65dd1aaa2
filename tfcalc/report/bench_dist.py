"""The report of `tfcalc bench ranks --nproc N`: forward + backward of the real model on N torch.distributed
ranks under a layout (DDP, FSDP, TP), timed on every rank with the loop of tfcalc.measure.bench.

A step here is one micro-batch per data-parallel rank: forward, the loss (vocabulary-parallel under TP),
backward with its gradient collectives (DDP's all-reduce, FSDP's gathers and reduce-scatters, TP's
activations). The step time is the slowest rank's median. Achieved FLOP/s per GPU counts the analytic
training FLOPs (3 × forward, full T×T attention square) of the dp × batch sequences, divided by the GPUs;
MFU divides it by the datasheet peak of the GPU (none on a CPU).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from tfcalc import devices
from tfcalc.count.model.flops import training_flops
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.errors import InputError
from tfcalc.measure.bench_run import BENCH_DTYPES
from tfcalc.report.display import Displayed
from tfcalc.report.model_ref import ModelRef
from tfcalc.report.plan_check import layout_json
from tfcalc.workload import Workload, check_size


@dataclass(frozen=True, repr=False)
class DistBenchReport(Displayed):
    model: ModelRef
    layout: Layout
    warmup: int
    repeat: int
    ranks: tuple[dict[str, Any], ...]  # each rank's answer (tfcalc.measure.distributed.run_bench)

    def headline(self) -> str:
        from tfcalc import units

        j = self.to_json()
        return f"{self.model.label} on {j['nproc']} ranks: {units.seconds(j['median_s'])} a training step"

    @property
    def step_s(self) -> float:
        return max(r["median_s"] for r in self.ranks)

    @property
    def flops(self) -> int:
        L = self.layout
        return training_flops(self.model.cfg, Workload(batch=L.dp * L.micro_batch, seq=L.seq))

    @property
    def peak(self) -> Optional[float]:
        return devices.peak_flops(self.ranks[0]["device_name"], self.layout.dtype)

    def to_json(self) -> dict[str, Any]:
        L, r0 = self.layout, self.ranks[0]
        achieved = self.flops / L.gpus / self.step_s
        return {
            "preset": self.model.cfg.name, "label": self.model.label, "nproc": L.gpus,
            "backend": r0["backend"], "device": r0["device"], "device_name": r0["device_name"], "dtype": L.dtype,
            "batch": L.micro_batch, "seq": L.seq, "layout": layout_json(L),
            "median_s": self.step_s, "p10_s": max(r["p10_s"] for r in self.ranks),
            "p90_s": max(r["p90_s"] for r in self.ranks),
            "tokens_per_s": L.dp * L.micro_batch * L.seq / self.step_s,
            "training_flops": self.flops, "achieved_flops_per_s": achieved,
            "peak_flops_per_s": self.peak, "mfu": achieved / self.peak if self.peak else None,
            "samples": self.repeat, "warmup": self.warmup,
            "ranks": [{"rank": r["rank"], "median_s": r["median_s"], "p10_s": r["p10_s"], "p90_s": r["p90_s"]}
                      for r in self.ranks],
        }


def plan_dist_bench(model: ModelRef, nproc: int, batch: int = 1, seq: Optional[int] = None, dtype: str = "fp32",
                    tp: Optional[int] = None, zero: int = 0, sequence_parallel: bool = False) -> Layout:
    """The layout each rank runs, checked: tp ranks (default 1), the rest data parallel."""
    from tfcalc.measure.launch import check_nproc
    from tfcalc.measure.parallelize import check_measurable

    cfg = model.cfg
    if dtype not in BENCH_DTYPES:
        raise InputError(f"--dtype: bench runs {', '.join(BENCH_DTYPES)}; got '{dtype}'")
    check_size("--nproc", nproc)
    tp = 1 if tp is None else tp  # --tp 0 is refused below, not read as 1
    check_size("--tp", tp)
    if nproc % tp:
        raise InputError(f"--tp {tp} does not divide --nproc {nproc}")
    dp = nproc // tp
    layout = Layout(tp=tp, pp=1, dp=dp, seq=check_size("--seq", seq) if seq else cfg.max_seq_len,
                    global_batch=dp * check_size("--batch", batch), micro_batch=batch, zero=zero, recompute="none",
                    sequence_parallel=sequence_parallel, dtype=dtype)
    check_layout(cfg, layout)
    check_measurable(cfg, layout)
    check_nproc(nproc)
    return layout


def check_dist_bench(model: ModelRef, layout: Layout, warmup: int, repeat: int, device: str) -> None:
    """Every refusal of a ranks run, before any rank starts (and before the command says anything else):
    the counts' bounds, the device, and the fit of every rank on this host (tfcalc.measure.fit)."""
    from tfcalc.measure import bounds
    from tfcalc.measure.fit import require_ranks_fit

    bounds.check("--repeat", repeat)
    bounds.check("--warmup", warmup, low=0)
    if device not in ("cpu", "cuda"):
        raise InputError(f"--device: bench ranks runs ranks on cpu (gloo) or cuda (NCCL, one GPU each); "
                         f"got '{device}'")
    require_ranks_fit(model.cfg, layout, layout.gpus, device, f"bench {model.cfg.name}")


def build_dist_bench(model: ModelRef, layout: Layout, warmup: int = 3, repeat: int = 10,
                     device: str = "cpu", on_status=None) -> DistBenchReport:
    """Time the layout's training step on its ranks; on_status: see tfcalc.measure.launch.launch."""
    from tfcalc.measure.launch import launch

    check_dist_bench(model, layout, warmup, repeat, device)
    job = {"mode": "bench", "config": dataclasses.asdict(model.cfg), "layout": dataclasses.asdict(layout),
           "warmup": warmup, "repeat": repeat}
    (ranks,) = launch([job], layout.gpus, device=device, on_status=on_status)
    return DistBenchReport(model, layout, warmup, repeat, tuple(ranks))
