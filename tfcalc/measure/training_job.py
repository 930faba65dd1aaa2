"""A distributed training job as each rank reads it from the request: its layout and the steps it runs
(warm-up steps, then the measured one). Shared by the plain ranks (tfcalc.measure.distributed) and the
pipeline's (tfcalc.measure.pipeline)."""

from __future__ import annotations

from tfcalc.count.training.layout import Layout

WARMUP_STEPS = 2  # lazy initialization, Adam's state, DDP's bucket rebuild (after its first synced backward)


def job_layout(job: dict) -> Layout:
    """The job's layout (JSON holds the overlap and the split counts as lists; the Layout tuples)."""
    fields = dict(job["layout"])
    fields["overlap"] = tuple(fields.get("overlap", ()))
    fields["pp_split_counts"] = tuple(fields.get("pp_split_counts", ()))
    fields["pp_layers"] = tuple(fields.get("pp_layers", ()))
    return Layout(**fields)


def job_steps(job: dict) -> int:
    """The steps a job reports (tfcalc.measure.rank_status): building the model, then each step it runs."""
    return 1 + (job["warmup"] + job["repeat"] if job.get("mode") == "bench" else WARMUP_STEPS + 1)
