"""Start N torch.distributed ranks on this machine, as torchrun would, and collect their answers.

Each rank is ``python -m tfcalc.measure.distributed request.json`` with torchrun's environment: RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR (127.0.0.1), MASTER_PORT (a free port) and, on
the CPU, OMP_NUM_THREADS = cores / N (torchrun sets 1; sharing the cores evenly is faster here). So the
same program runs under ``torchrun`` on a cluster. One launch runs a list of jobs, so one start-up
(seconds, mostly importing torch and the rendezvous) serves several checks.

Limits: on CUDA, one rank per GPU (N ≤ the GPUs present); on the CPU, N ≤ 4 × the cores (gloo ranks
share cores; beyond that a run is too slow to be useful). A rank that fails makes the launch fail with
its last line of stderr, the others are stopped, and nothing is left behind.

No rank outlives the launch, however it ends (issue 23):
- each rank runs in its own session (its own process group: a terminal's Ctrl-C reaches tfcalc alone,
  which then stops the ranks once), and is stopped by killing its whole group, what it started included;
- every way out of the wait -- an error, Ctrl-C, the SIGTERM/SIGHUP that tfcalc.cli.interrupts turns into
  an exception, or (from the Python API, where the default would end the process at once) a SIGTERM or
  SIGHUP caught here for the length of the launch -- kills the ranks in a ``finally``;
- SIGKILL of tfcalc runs no code: each rank asked the kernel to kill it with its parent
  (tfcalc.measure.lifeline.die_with_parent), and the temporary folder, named with tfcalc's pid, is removed
  by its lifeline (lifeline.run_folder; a folder whose lifeline was killed too is swept by the next launch).
  TorchInductor's cache goes inside that folder too. Every launch of ranks takes its folder from
  ``run_folder`` (this module's ``launch`` and tfcalc.measure.serving_tp).
- a watchdog: a rank that dies ends the run at once, named with how it ended (its exit code, or the
  signal: SIGSEGV, SIGKILL); a rank stopped (SIGSTOP, a debugger) for STOPPED_LIMIT_S ends it too, rather
  than leaving the others waiting in a collective until the time limit.

``TORCH_DISTRIBUTED_DEBUG=DETAIL`` is not passed to the ranks: with it, gloo ranks of torch 2.13 crash
(SIGSEGV) in the first collective of the measured run; OFF and INFO are passed as set.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tfcalc.errors import InputError
from tfcalc.measure.lifeline import PARENT_ENV, run_folder, signal_name
from tfcalc.measure.rank_status import StatusReader

CPU_OVERSUBSCRIBE = 4
STOPPED_LIMIT_S = 5.0  # a rank stopped this long ends the run (its peers would wait for it in a collective)
TEMP_PREFIX = "tfcalc-dist-"


def max_ranks(device: str | None = None) -> tuple[int, str]:
    """(the most ranks this machine runs, what it runs them on)."""
    import torch

    if device != "cpu" and torch.cuda.is_available():
        return torch.cuda.device_count(), "CUDA GPUs"
    return CPU_OVERSUBSCRIBE * (os.cpu_count() or 1), f"gloo ranks on {os.cpu_count()} CPU cores"


def ranks_device(nproc: int, device: str | None = None) -> str:
    """Where nproc ranks run when device is None: 'cuda' (NCCL, one GPU each) when CUDA is available with a
    GPU for every rank, else 'cpu' (gloo) -- a one-GPU machine measures a two-rank plan on the CPU rather
    than refusing it; 'cpu' and 'cuda' as given."""
    if device is not None:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= nproc else "cpu"


def check_nproc(nproc: int, device: str | None = None) -> None:
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise InputError(f"--nproc must be a positive integer; got {nproc}")
    device = ranks_device(nproc, device)
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
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
               GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS=str(threads),
               MALLOC_MMAP_THRESHOLD_="65536", PYTHONWARNINGS="ignore")
    env[PARENT_ENV] = str(os.getpid())
    if env.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":  # see the module docstring
        del env["TORCH_DISTRIBUTED_DEBUG"]
    return env


_EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[\w.]+\.)?\w*(?:Error|Exception)\b.*)$")


def _why(path: str) -> str:
    """The last exception line a rank wrote (its traceback's last line), else its last line."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line.strip() for line in f.read().splitlines() if line.strip()]
    errors = [m.group(1) for m in map(_EXCEPTION.match, lines) if m]
    return (errors or lines or [""])[-1][:300]


def _state(pid: int) -> str:
    """The process's state letter from /proc (R, S, D, T stopped, t traced, Z zombie), '' when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0] if ")" in stat else ""


def _kill(procs) -> None:
    """SIGKILL every rank still running, with what it started (its process group), and reap it."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                p.kill()
    for p in procs:
        p.wait()


def _wait(procs, timeout: float, watch=None, done=None) -> str | None:
    """Until every rank has exited (or done() is true: ranks kept by tfcalc.measure.rank_pool), or one has
    failed (the others are then stopped: they would wait for it forever in a collective), or one is stopped
    for STOPPED_LIMIT_S, or the time is up. Returns why the run was ended early, None when every rank
    finished by itself. watch() is called at each look."""
    deadline = time.monotonic() + timeout
    stopped_since: dict[int, float] = {}
    while not done() if done is not None else any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) if done is None else p.poll() is not None for p in procs):
            return None  # a kept rank (done given) never exits by itself during a run
        now = time.monotonic()
        if now > deadline:
            return f"the distributed run took more than {timeout:g} s; try a smaller model or --nproc"
        for r, p in enumerate(procs):
            if p.poll() is None and _state(p.pid) in ("T", "t"):
                since = stopped_since.setdefault(r, now)
                if now - since >= STOPPED_LIMIT_S:
                    return (f"the distributed run was ended: rank {r} (pid {p.pid}) was stopped (SIGSTOP, or a "
                            f"debugger) for {STOPPED_LIMIT_S:g} s while the other ranks waited for it")
            else:
                stopped_since.pop(r, None)
        if watch is not None:
            watch()
        time.sleep(0.05)
    return None


def _ending(code: int) -> str:
    return f"killed by {signal_name(-code)}" if code < 0 else f"exit {code}"


@contextlib.contextmanager
def _signals_stop(procs):
    """For the length of the launch: a SIGTERM or SIGHUP whose disposition is the default (the Python API;
    the command line turns them into an exception) first kills the ranks, then ends the process as the
    default would."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def stop(signum, frame):
        _kill(procs)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def failure(codes: list[int | None], logs: list[str]) -> str | None:
    """The one line for ranks that ended with these exit codes (None: still running when the run ended),
    None when none failed: the rank that failed by itself (not one stopped because of it), how it ended and
    its exception line."""
    failed = [r for r, code in enumerate(codes) if code not in (None, 0)]
    if not failed:
        return None
    # the cause first: a rank a signal ended (its peers then fail with a closed connection), else the
    # first to exit with an error
    r = ([r for r in failed if codes[r] < 0] or failed)[0]
    why = _why(logs[r])
    if codes[r] < 0:
        why = f"{why} (its last words)" if why else ""
    message = f"the distributed run failed: rank {r} ({_ending(codes[r])})"
    return f"{message}: {why}" if why else message


def run_ranks(cmd: list[str], nproc: int, logs: list[str], timeout: float, watch=None) -> None:
    """Start cmd as ranks 0..nproc-1 (stderr to logs[r]) and wait, calling watch() while they run;
    InputError naming the rank that failed by itself (not one stopped because of it), how it ended and
    its exception line. Inside tfcalc.measure.rank_pool.shared(), ranks kept from an earlier launch run a
    tfcalc.measure program instead of fresh ones (the same program, files and answers)."""
    from tfcalc.measure.rank_pool import pool_for

    pool = pool_for(cmd, nproc, lambda r: rank_env(r, nproc, 0), TEMP_PREFIX)
    procs: list[subprocess.Popen] = pool.procs if pool is not None else []
    ok = False
    with _signals_stop(procs):
        try:
            if pool is not None:
                done = pool.submit(cmd, logs, free_port())
            else:
                done, port = None, free_port()
                for r in range(nproc):
                    env = rank_env(r, nproc, port)  # TorchInductor's cache in the launch's folder: removed with it
                    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.path.dirname(logs[r]), "inductor"))
                    with open(logs[r], "w", encoding="utf-8") as err:
                        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                                      start_new_session=True))
            ended = _wait(procs, timeout, watch, done)
            codes = [p.poll() for p in procs]
            ok = not ended and failure(codes, logs) is None and (done is None or done())
        finally:  # Ctrl-C, SIGTERM, an error: no rank left behind (nor a pool whose rank may sit in a collective)
            codes = [p.poll() for p in procs]
            if pool is None:
                _kill(procs)
            elif not ok:
                pool.close()
    if ended:
        raise InputError(ended)
    message = failure(codes, logs)
    if message:
        raise InputError(message)
    if not ok:  # a kept rank that left with exit 0 before its run was done
        raise InputError("the distributed run failed: a rank left before the run ended")


def run_module(module: str, request: dict, nproc: int, timeout: float) -> list[dict]:
    """Run ``python -m module request.json`` as ranks 0..nproc-1 in a fresh folder, each rank writing its record to
    rank-R.json beside the request; every rank's record (tfcalc.measure.serving_tp, serving_ep, adp_pace)."""
    with run_folder(TEMP_PREFIX) as tmp:
        path = os.path.join(tmp, "request.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(request, f)
        logs = [os.path.join(tmp, f"rank-{r}.err") for r in range(nproc)]
        run_ranks([sys.executable, "-m", module, path], nproc, logs, timeout)
        out = []
        for r in range(nproc):
            with open(os.path.join(tmp, f"rank-{r}.json"), encoding="utf-8") as f:
                out.append(json.load(f))
        return out


def launch(jobs: list[dict], nproc: int, timeout: float = 600, device: str | None = None,
           on_status=None) -> list[list[dict]]:
    """Run the jobs on nproc local ranks; answers[job][rank]. device 'cpu' keeps the ranks on gloo even
    where CUDA is available; None lets them pick (ranks_device: NCCL on CUDA when there is a GPU for each).
    on_status(list of RankStatus), when given, is called while the ranks run with each rank's furthest step
    yet (tfcalc.measure.rank_status)."""
    check_nproc(nproc, device)
    device = ranks_device(nproc, device)
    with run_folder(TEMP_PREFIX) as tmp:
        path = os.path.join(tmp, "request.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"jobs": jobs, "device": device}, f)
        logs = [os.path.join(tmp, f"rank-{r}.err") for r in range(nproc)]
        watch = None
        if on_status is not None:
            reader = StatusReader(tmp, nproc)

            def watch():
                on_status(reader.poll())

        run_ranks([sys.executable, "-m", "tfcalc.measure.distributed", path], nproc, logs, timeout, watch)
        if watch is not None:
            watch()  # the last steps, written as the ranks ended
        answers = []
        for r in range(nproc):
            with open(os.path.join(tmp, f"rank-{r}.json"), encoding="utf-8") as f:
                answers.append(json.load(f))
    return [[answers[r][j] for r in range(nproc)] for j in range(len(jobs))]
