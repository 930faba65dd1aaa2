"""The plan request's pipeline schedule, split counts, overlap and context-parallel fields (issue 20): their checks,
for the Python API as for the command line, and what they leave to the search."""

from __future__ import annotations

from typing import Any

from tfcalc.count.perf.pipeline import SCHEDULES
from tfcalc.count.training.layout_pipeline import check_overlap, check_split_counts
from tfcalc.count.training.search_space import SearchSpace
from tfcalc.errors import InputError, shown
from tfcalc.workload import check_size


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


def search_space(r: Any) -> SearchSpace:
    """What the request fixes and what it leaves to the search (tfcalc.count.training.search_space)."""
    return SearchSpace(micro_batch=r.micro_batch, schedule=r.schedule,
                       virtual_stages=r.virtual_stages if r.schedule == "interleaved" else
                       (1 if r.schedule is not None else None), cp=r.cp,
                       pp_split_counts=None if r.pp_split_counts is None else tuple(r.pp_split_counts),
                       # HSDP and no-reshard unless the request fixes the FSDP flavour or the ZeRO stage
                       fsdp=r.hsdp is None and r.reshard_after_forward and r.zero in (None, 3),
                       offload=not r.offload)  # offload where nothing fits, unless the request names it
