"""Start N torch.distributed ranks on this machine, as torchrun would, and collect their answers.

Each rank is ``python -m tfcalc.measure.distributed request.json`` with torchrun's environment: RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR (127.0.0.1), MASTER_PORT (a free port) and, on
the CPU, OMP_NUM_THREADS = cores / N (torchrun sets 1; sharing the cores evenly is faster here). So the
same program runs under ``torchrun`` on a cluster. One launch runs a list of jobs, so one start-up
(seconds, mostly importing torch and the rendezvous) serves several checks.

Limits: on CUDA, one rank per GPU (N ≤ the GPUs present); on the CPU, N ≤ 4 × the cores (gloo ranks
share cores; beyond that a run is too slow to be useful). A rank that fails makes the launch fail with
its last line of stderr, the others are stopped, and nothing is left behind.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

from tfcalc.errors import InputError

CPU_OVERSUBSCRIBE = 4


def max_ranks(device: str | None = None) -> tuple[int, str]:
    """(the most ranks this machine runs, what it runs them on)."""
    import torch

    if device != "cpu" and torch.cuda.is_available():
        return torch.cuda.device_count(), "CUDA GPUs"
    return CPU_OVERSUBSCRIBE * (os.cpu_count() or 1), f"gloo ranks on {os.cpu_count()} CPU cores"


def check_nproc(nproc: int, device: str | None = None) -> None:
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise InputError(f"--nproc must be a positive integer; got {nproc}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError(f"ranks on cuda asked for, but CUDA is not available here (torch {torch.__version__})")
    limit, what = max_ranks(device)
    if nproc > limit:
        raise InputError(f"--nproc {nproc} is more than this machine runs ({limit} {what})")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, nproc: int, port: int) -> dict[str, str]:
    """torchrun's variables for one local rank of a single-node job."""
    threads = max(1, (os.cpu_count() or 1) // nproc)
    return dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS=str(threads),
                MALLOC_MMAP_THRESHOLD_="65536", PYTHONWARNINGS="ignore")


_EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[\w.]+\.)?\w*(?:Error|Exception)\b.*)$")


def _why(path: str) -> str:
    """The last exception line a rank wrote (its traceback's last line), else its last line."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line.strip() for line in f.read().splitlines() if line.strip()]
    errors = [m.group(1) for m in map(_EXCEPTION.match, lines) if m]
    return (errors or lines or [""])[-1][:300]


def _wait(procs, timeout: float) -> None:
    """Until every rank has exited, or one has failed (the others are then stopped: they would wait
    for it forever in a collective), or the time is up."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    if time.monotonic() > deadline:
        raise InputError(f"the distributed run took more than {timeout:g} s; try a smaller model or --nproc")


def run_ranks(cmd: list[str], nproc: int, logs: list[str], timeout: float) -> None:
    """Start cmd as ranks 0..nproc-1 (stderr to logs[r]) and wait; InputError naming the first rank that
    failed by itself (not one stopped because of it) and its exception line."""
    port = free_port()
    procs = []
    for r in range(nproc):
        with open(logs[r], "w", encoding="utf-8") as err:
            procs.append(subprocess.Popen(cmd, env=rank_env(r, nproc, port), stdout=subprocess.DEVNULL, stderr=err))
    _wait(procs, timeout)
    failed = [r for r, p in enumerate(procs) if p.returncode]
    if failed:
        r = ([r for r in failed if procs[r].returncode > 0] or failed)[0]
        why = _why(logs[r]) or ("killed, likely out of memory" if procs[r].returncode < 0 else "no message")
        raise InputError(f"the distributed run failed: rank {r} (exit {procs[r].returncode}): {why}")


def launch(jobs: list[dict], nproc: int, timeout: float = 600, device: str | None = None) -> list[list[dict]]:
    """Run the jobs on nproc local ranks; answers[job][rank]. device 'cpu' keeps the ranks on gloo even
    where CUDA is available; None lets them pick (NCCL on CUDA)."""
    check_nproc(nproc, device)
    with tempfile.TemporaryDirectory(prefix="tfcalc-dist-") as tmp:
        path = os.path.join(tmp, "request.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"jobs": jobs, "device": device}, f)
        logs = [os.path.join(tmp, f"rank-{r}.err") for r in range(nproc)]
        run_ranks([sys.executable, "-m", "tfcalc.measure.distributed", path], nproc, logs, timeout)
        answers = []
        for r in range(nproc):
            with open(os.path.join(tmp, f"rank-{r}.json"), encoding="utf-8") as f:
                answers.append(json.load(f))
    return [[answers[r][j] for r in range(nproc)] for j in range(len(jobs))]
