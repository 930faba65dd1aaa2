"""The plan request's pipeline schedule, split counts, overlap and context-parallel fields (issue 20): their checks,
for the Python API as for the command line, and what they leave to the search."""

from __future__ import annotations

from typing import Any

from tfcalc.count.perf.pipeline import SCHEDULES
from tfcalc.count.training.layout_pipeline import check_overlap, check_split_counts
from tfcalc.count.training.search_space import SearchSpace
from tfcalc.errors import InputError, shown
from tfcalc.workload import check_size


def stage_counts(value: Any) -> Any:
    """--pp-layers' text ("31,30") as a tuple of ints; a sequence as a tuple; None kept (check_schedule_request
    refuses anything else in one line)."""
    if isinstance(value, str):
        try:
            return tuple(int(v) for v in value.replace(" ", "").split(","))
        except ValueError:
            raise InputError(f"--pp-layers takes comma-separated block counts, one per stage; got {value!r}") from None
    return tuple(value) if isinstance(value, (list, tuple)) else value


def check_schedule_request(r: Any) -> None:
    """One InputError line for a bad schedule, virtual-stages, overlap or cp value (their combinations
    with a layout: tfcalc.count.training.layout_pipeline)."""
    if r.schedule is not None and (not isinstance(r.schedule, str) or r.schedule not in SCHEDULES):
        raise InputError(f"--schedule must be one of {', '.join(SCHEDULES)}; got {shown(r.schedule)}")
    if r.virtual_stages is not None:
        check_size("--virtual-stages", r.virtual_stages)
        if r.virtual_stages > 1 and r.schedule != "interleaved":
            raise InputError(f"--virtual-stages {r.virtual_stages} needs --schedule interleaved")
    if r.cp is not None:
        check_size("--cp", r.cp)
    check_overlap(r.overlap)
    if r.pp_split_counts is not None:
        check_split_counts(r.pp_split_counts)
    if r.pp_layers is not None:  # its sum and length against the model: tfcalc.count.training.layout_pipeline
        if r.pp is None:
            raise InputError("--pp-layers gives each pipeline stage's blocks: it needs --pp")
        if not isinstance(r.pp_layers, tuple) or not all(type(n) is int for n in r.pp_layers):
            raise InputError(f"--pp-layers must be a list of positive integers; got {shown(r.pp_layers)}")


def search_space(r: Any) -> SearchSpace:
    """What the request fixes and what it leaves to the search (tfcalc.count.training.search_space)."""
    return SearchSpace(micro_batch=r.micro_batch, schedule=r.schedule,
                       virtual_stages=r.virtual_stages if r.schedule == "interleaved" else
                       (1 if r.schedule is not None else None), cp=r.cp,
                       pp_split_counts=None if r.pp_split_counts is None else tuple(r.pp_split_counts),
                       # HSDP and no-reshard unless the request fixes the FSDP flavour or the ZeRO stage
                       fsdp=r.hsdp is None and r.reshard_after_forward and r.zero in (None, 3),
                       offload=not r.offload)  # offload where nothing fits, unless the request names it
