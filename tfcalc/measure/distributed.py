"""One rank of a real distributed training run: the program every process runs, under tfcalc's own
launcher (tfcalc.measure.launch) or under ``torchrun`` on a cluster, unchanged:

    torchrun --nproc-per-node 8 -m tfcalc.measure.distributed request.json

It reads RANK, WORLD_SIZE and LOCAL_RANK the torchrun way (``init_process_group`` with the env://
rendezvous, MASTER_ADDR/MASTER_PORT), picks NCCL and the GPU LOCAL_RANK when CUDA is available, gloo on
the CPU otherwise, runs every job of the request in turn and writes ``rank-<RANK>.json`` beside the
request.

A "measure" job: build the real model (tfcalc.model, in the layout's dtype -- fp32 for --measure --,
the same seed on every rank), apply the layout (tfcalc.measure.parallelize), and train: two steps warm
up (lazy initialization, Adam's state, DDP's bucket rebuild), the third is measured. Each step runs m
micro-batches (DDP accumulates under no_sync, FSDP2 reduce-scatters each micro-batch), reduces the
partial gradients sequence parallelism leaves (tfcalc.count.training.comm, cause 5), steps Adam (foreach=False;
under ZeRO-1 inside PyTorch's ZeroRedundancyOptimizer, which broadcasts each rank's updated tensors)
and sets the gradients to None.
Measured on every rank:
- weights, gradients, optimizer states: bytes of the distinct storages behind the rank's local tensors
  (a DTensor's local shard; FSDP2's padded shard storage; DDP's gradient buckets); gradients after the
  gradient sync, optimizer states after the step, Adam's 0-d step counters left out;
- collectives: every call during the measured step (tfcalc.measure.collectives);
- saved activations: bytes autograd keeps for backward in the measured step's first micro-batch
  (distinct storages of the local tensors packed, parameters excluded), as tfcalc.measure.memory does;
- peak memory above a baseline taken before the model is built (tfcalc.measure.peak_meter);
- the wall time of the measured step, and the loss of the first micro-batch before any update (the
  sharded model must compute the single-device model's loss: tests/measure/test_distributed.py).
A "bench" job times forward + backward of one micro-batch with tfcalc.measure.bench.time_calls.
While it runs, each rank writes its step to ``rank-<RANK>.status`` beside the request (the rendezvous,
building the model, each warm-up and timed step: tfcalc.measure.rank_status), for the parent's progress
lines; between steps, outside any timed span.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
import warnings

import torch
import torch.nn.functional as F

from tfcalc.config import from_mapping
from tfcalc.count.training.layout import Layout
from tfcalc.measure.rank_bytes import SavedBytes, optimizer_tensors, storage_bytes
from tfcalc.measure.rank_status import StatusWriter
from tfcalc.measure.training_job import WARMUP_STEPS, job_layout, job_steps


def local_gpu(local_rank: int, visible: int) -> int:
    """The GPU index of a local rank: LOCAL_RANK itself (torchrun's one rank per GPU of the node), or 0
    where the process sees one GPU only (a scheduler that binds each task its own GPU through
    CUDA_VISIBLE_DEVICES); a one-line error where the node has fewer GPUs than ranks."""
    if visible == 1:
        return 0
    if not 0 <= local_rank < visible:
        raise RuntimeError(f"LOCAL_RANK {local_rank} has no GPU: this process sees {visible} CUDA device(s); "
                           f"start at most {visible} ranks per node")
    return local_rank


def init_process_group(device: str | None = None) -> torch.device:
    """torch.distributed from torchrun's environment; NCCL on the GPU of LOCAL_RANK (local_gpu) when CUDA
    is available (and device is not 'cpu'), else gloo on the CPU. A rank kept by tfcalc.measure.rank_pool
    keeps the group of its first run (one pool per device), as one launch keeps it for all its jobs: a
    group made anew after destroy_process_group takes the names of the old ones, which DeviceMesh's caches
    still hold (gloo ranks then fail: "Could not resolve the process group registered under the name 3")."""
    import torch.distributed as dist

    if device != "cpu" and torch.cuda.is_available():
        index = local_gpu(int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count())
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        if not dist.is_initialized():
            dist.init_process_group("gloo")
    return device


def leave_process_group() -> None:
    """The end of a rank program: destroy the group, unless a rank pool keeps it for the next run."""
    import torch.distributed as dist

    from tfcalc.measure.rank_pool import POOLED

    if not os.environ.get(POOLED):
        dist.destroy_process_group()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads)"


def optimizer(model, layout: Layout):
    """Adam (foreach=False); under ZeRO-1, PyTorch's ZeroRedundancyOptimizer around it, one bucket per rank
    (tfcalc.count.training.sharding, step 7)."""
    if layout.optimizer == "muon":  # DDP only (report.plan_check.measured_layout): Muon + AdamW on every rank
        from tfcalc.measure.muon_step import MasterMuon

        return MasterMuon(model)
    if layout.zero == 1 and layout.dp > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                       parameters_as_bucket_view=True, foreach=False)
    return torch.optim.Adam(model.parameters(), foreach=False)


def forward_backward(model, idx, tp: int, scale: float, log=None, saved: SavedBytes | None = None,
                     source: bool = False) -> torch.Tensor:
    """Forward, cross-entropy of the logits upcast to fp32 and backward of loss × scale; returns the
    loss, detached. Under TP the loss is vocabulary-parallel (loss_parallel, which must also hold the
    backward pass). ``source``: an encoder-decoder, which reads idx as its source too (a source as long
    as the target: the plan's default source length)."""
    from torch.distributed.tensor.parallel import loss_parallel

    hooks = torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t) if saved else contextlib.nullcontext()
    with loss_parallel() if tp > 1 else contextlib.nullcontext():
        with hooks:
            output = model(idx, idx) if source else model(idx)
            if log is not None:
                log.phase = "loss"
            loss = F.cross_entropy(output.float().view(-1, output.shape[-1]), idx.view(-1))
        if log is not None:
            log.phase = "backward"
        (loss * scale).backward()
    return loss.detach()


def sync_partial_grads(model) -> None:
    """All-reduce the gradients left as partial sums (replicated parameters under sequence parallelism)."""
    from torch.distributed.tensor import DTensor, Replicate

    for p in model.parameters():
        g = p.grad
        if isinstance(g, DTensor) and any(pl.is_partial() for pl in g.placements):
            p.grad = g.redistribute(placements=[Replicate()] * len(g.placements))


def _no_sync(model, last: bool):
    if hasattr(model, "no_sync") and not last:
        return model.no_sync()
    return contextlib.nullcontext()


class Trainer:
    """The model under a layout, its optimizer and this rank's batches."""

    def __init__(self, job: dict, device: torch.device):
        from tfcalc.measure.device import torch_dtype
        from tfcalc.measure.parallelize import parallelize
        from tfcalc.model import build_model

        self.cfg = from_mapping(job["config"])
        self.layout = job_layout(job)
        torch.manual_seed(job.get("seed", 0))
        model = build_model(self.cfg, device, torch_dtype(self.layout.dtype)).train()
        self.model, self.mesh, self.groups = parallelize(model, self.cfg, self.layout, device)
        self.opt = optimizer(self.model, self.layout)
        dp_rank = self.mesh.get_local_rank("dp")
        gen = torch.Generator().manual_seed(1000 + dp_rank)  # TP ranks of one DP rank read the same tokens
        L = self.layout
        self.batches = [torch.randint(0, self.cfg.vocab_size, (L.micro_batch, L.seq), generator=gen).to(device)
                        for _ in range(L.micro_batches)]

    def micro_step(self, i: int, log=None, saved: SavedBytes | None = None) -> torch.Tensor:
        """Forward and backward of micro-batch i (DDP syncs gradients on the last one only); its loss."""
        with _no_sync(self.model, i == len(self.batches) - 1):
            return forward_backward(self.model, self.batches[i], self.layout.tp, 1 / len(self.batches), log, saved,
                                    self.cfg.arch == "encoder-decoder")

    def step(self, log=None, saved: SavedBytes | None = None) -> dict[str, int]:
        """One optimizer step over the micro-batches, recorded section by section when a log is given;
        the state bytes read along the way."""
        def section(phase):
            return log.section(phase) if log is not None else contextlib.nullcontext()

        for i in range(len(self.batches)):
            with section("forward"):
                loss = self.micro_step(i, log, saved if i == 0 else None)
                if i == 0:
                    self.first_loss = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        params = list(self.model.parameters())
        with section("grad_sync"):
            sync_partial_grads(self.model)
        grads = storage_bytes(p.grad for p in params)
        with section("optimizer"):
            self.opt.step()
            self.opt.zero_grad()  # set to None: a partial gradient must not be added into a reduced one
        return {"weights_bytes": storage_bytes(params), "grads_bytes": grads,
                "optimizer_bytes": storage_bytes(optimizer_tensors(self.opt))}


def _quiet(phase: str) -> None:
    pass


def run_measure(job: dict, device: torch.device, advance=_quiet) -> dict:
    if job["layout"].get("pp", 1) > 1:  # a pipeline: torch.distributed.pipelining's schedules
        from tfcalc.measure.pipeline import run_pipeline

        return run_pipeline(job, device, advance)
    from tfcalc.measure.bench import host_seconds
    from tfcalc.measure.collectives import CollectiveLog
    from tfcalc.measure.device import resolve_device
    from tfcalc.measure.peak_meter import peak_meter

    meter = peak_meter(resolve_device(str(device)))
    meter.start()
    trainer = Trainer(job, device)
    advance(f"warm-up step 1 of {WARMUP_STEPS}")
    for step in range(WARMUP_STEPS):
        trainer.step()
        if step == 0:  # before any update: the loss of the unchanged model on the first micro-batch
            first_loss = float(trainer.first_loss)
        advance(f"warm-up step {step + 2} of {WARMUP_STEPS}" if step + 1 < WARMUP_STEPS else "the measured step")
    log, saved = CollectiveLog(trainer.groups, trainer.layout.sequence_parallel), SavedBytes(trainer.model)
    result = {}  # on CUDA the step's kernels and NCCL calls are asynchronous: synchronized before each clock read
    step_s = host_seconds(lambda: result.update(trainer.step(log, saved)), device)
    states = result
    advance("done")
    collectives = [dataclasses.asdict(c) for c in log.collectives()]
    return {**states, "step_s": step_s, "first_loss": first_loss, "activation_bytes": saved.total,
            "peak_bytes": meter.peak(), "peak_method": meter.method, "collectives": collectives,
            "comm_counts": log.counts}


def run_bench(job: dict, device: torch.device, advance=_quiet) -> dict:
    from tfcalc.measure.bench import time_calls

    trainer = Trainer(job, device)
    idx = trainer.batches[0]  # one micro-batch, gradients synchronized (no no_sync)
    warmup, repeat = job["warmup"], job["repeat"]
    calls = [0]

    def phase(n: int) -> str:  # what call n (0-based) is
        return f"warm-up {n + 1} of {warmup}" if n < warmup else f"timed {n - warmup + 1} of {repeat}"

    def called():  # between calls, outside the timed span
        calls[0] += 1
        advance(phase(calls[0]) if calls[0] < warmup + repeat else "done")

    def step():
        forward_backward(trainer.model, idx, trainer.layout.tp, 1.0, source=trainer.cfg.arch == "encoder-decoder")
        trainer.opt.zero_grad()

    advance(phase(0))
    timing = time_calls(step, device, warmup, repeat, on_call=called)
    return {"samples": list(timing.samples), "median_s": timing.median, "p10_s": timing.p10, "p90_s": timing.p90}


def main(argv: list[str] | None = None) -> None:
    """Run every job of the request (a JSON file) and write this rank's answers beside it."""
    import torch.distributed as dist

    from tfcalc.measure.lifeline import die_with_parent

    die_with_parent()  # launched by tfcalc: killed with it, even by SIGKILL (nothing under torchrun)
    warnings.filterwarnings("ignore")
    # imported for their side effect only, before any baseline is taken: their code pages count in RSS
    from torch.distributed.fsdp import fully_shard  # noqa: F401 (side effect: loaded before the baseline)
    from torch.distributed.tensor.parallel import parallelize_module  # noqa: F401 (the same)

    import tfcalc.measure.collectives  # noqa: F401 (the same)
    import tfcalc.measure.parallelize  # noqa: F401 (the same)

    path = (argv or sys.argv[1:])[0]
    with open(path, encoding="utf-8") as f:
        request = json.load(f)
    jobs = request["jobs"]
    folder = os.path.dirname(os.path.abspath(path))
    status = StatusWriter(folder, int(os.environ.get("RANK", "0")), 1 + sum(map(job_steps, jobs)))
    status.write("rendezvous")
    device = init_process_group(request.get("device"))
    rank = dist.get_rank()
    answers = []
    for j, job in enumerate(jobs):
        run = run_bench if job.get("mode") == "bench" else run_measure
        start = time.perf_counter()
        of = f"job {j + 1} of {len(jobs)}: " if len(jobs) > 1 else ""
        # the first counts the rendezvous done; a later one follows its job's "done", which counted its last step
        (status.advance if j == 0 else status.write)(f"{of}building the model")
        answer = run(job, device, lambda phase, of=of: status.advance(of + phase))
        answers.append({**answer, "rank": rank, "world_size": dist.get_world_size(), "backend": dist.get_backend(),
                        "device": str(device), "device_name": device_name(device),
                        "seconds": time.perf_counter() - start})
        dist.barrier()
    out = os.path.join(folder, f"rank-{rank}.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(answers, f)
    leave_process_group()


if __name__ == "__main__":
    main()
