"""Rank workers kept between launches: N processes started once, each running one rank program after another.

A launch (tfcalc.measure.launch.run_ranks) starts N fresh Python processes: each imports torch and the
distributed stack (FSDP2, DTensor, the pipelining schedules) and meets the others at the rendezvous before its
first job -- seconds a rank on an idle 2-core machine, most of a small run, and far more on a busy one. Where
many launches follow one another in one process (the test suite: about twenty, of a few small jobs each),
``shared()`` keeps the workers between them, one pool per rank count and device: inside it, a launch of a
tfcalc.measure program (``python -m tfcalc.measure.X request.json``) on N ranks hands the request to N workers
that already imported everything, and each worker calls the module's ``main([request.json])`` in-process.
The program's first run initializes the process group and, with POOLED in its environment, leaves it for
the next (tfcalc.measure.distributed.init_process_group, leave_process_group): the runs of a pool share one
group, as the jobs of one launch always have. The program, its files and its answers are the same; a
worker's stderr goes to the launch's log for that rank.

Outside ``shared()`` nothing changes: every launch starts its own ranks, and no rank outlives it (the
promise of tfcalc.measure.launch, kept for the CLI and the Python API). Inside it, a launch falls back to
fresh ranks where a pool could differ from them: another command than a tfcalc.measure program, or an
environment changed since the pool started (the ranks inherit it: a variable a test sets for its run).
A request that fails (a rank's exception, a signal, a stopped rank, the time limit, Ctrl-C) ends the pool
(a rank left inside a collective could not serve another run): the error is the one a fresh launch gives,
and the next launch starts a new pool. The workers die with their parent (tfcalc.measure.lifeline), and
``shared()`` stops them when it ends.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# What a pool ignores when it compares the environment with the one it started in: pytest's name of the
# running test and the terminal's shape and colour, which no rank reads.
IGNORED_ENV = frozenset({"PYTEST_CURRENT_TEST", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM"})
POOLED = "TFCALC_RANK_POOL"  # set in a worker's environment: its rank programs keep the process group
POLL_S = 0.02  # how often an idle worker looks for a request
STOP_S = 2.0  # how long close() waits for the workers to leave before killing them

_shared: dict[tuple[int, str | None], Pool] | None = None  # (ranks, device) -> its pool, in shared()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in IGNORED_ENV}


@contextlib.contextmanager
def shared():
    """Keep rank workers between launches inside this block (a pool per rank count and device); stop them after."""
    global _shared
    previous, _shared = _shared, {}
    try:
        yield
    finally:
        pools, _shared = _shared, previous
        for pool in pools.values():
            pool.close()


def pool_for(cmd: list[str], nproc: int, env_for, prefix: str) -> Pool | None:
    """The pool that runs cmd on nproc ranks, started if need be (env_for(rank): a worker's environment; its
    folder named prefix + pid, as a launch's); None where a fresh launch must run it."""
    if _shared is None or len(cmd) != 4 or cmd[:2] != [sys.executable, "-m"]:
        return None
    if not cmd[2].startswith("tfcalc.measure."):
        return None
    try:
        with open(cmd[3], encoding="utf-8") as f:
            key = (nproc, json.load(f).get("device"))  # a worker's group is of one backend: a pool per device
    except (OSError, ValueError, AttributeError):
        return None
    pool = _shared.get(key)
    if pool is not None and not pool.usable():
        pool.close()
        pool = None
    if pool is None:
        pool = _shared[key] = Pool(nproc, env_for, prefix)
    return pool


class Pool:
    """nproc workers (``python -m tfcalc.measure.rank_pool FOLDER RANK``) with torchrun's environment, the
    master port left to each request; requests and completions are files in the pool's folder."""

    def __init__(self, nproc: int, env_for, prefix: str):
        self.nproc, self.env, self.served = nproc, _env(), 0
        from tfcalc.measure.lifeline import lifeline

        self.folder = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-pool-")
        self.lifeline = lifeline(self.folder)  # removes the folder if tfcalc is killed
        self.procs: list[subprocess.Popen] = []
        for r in range(nproc):
            env = env_for(r)
            env[POOLED] = "1"
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(self.folder, "inductor"))
            with open(os.path.join(self.folder, f"worker-{r}.err"), "w", encoding="utf-8") as err:
                self.procs.append(subprocess.Popen([sys.executable, "-m", "tfcalc.measure.rank_pool", self.folder,
                                                    str(r)], env=env, stdout=subprocess.DEVNULL, stderr=err,
                                                   start_new_session=True))

    def usable(self) -> bool:
        return all(p.poll() is None for p in self.procs) and _env() == self.env

    def submit(self, cmd: list[str], logs: list[str], port: int):
        """Hand cmd's program to the workers (rank r's stderr to logs[r], the rendezvous on port); returns
        done(), true once every worker finished it. A worker that fails exits: the caller sees it in procs."""
        self.served += 1
        k = self.served
        for log in logs:  # there, even for a worker that dies before it opens its own
            open(log, "w", encoding="utf-8").close()
        request = {"module": cmd[2], "argv": cmd[3:], "port": port, "logs": logs}
        path = os.path.join(self.folder, f"request-{k}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(request, f)
        os.replace(path + ".tmp", path)  # whole, or not there: a worker never reads half a request
        marks = [os.path.join(self.folder, f"done-{k}-{r}") for r in range(self.nproc)]
        return lambda: all(os.path.exists(m) for m in marks)

    def close(self) -> None:
        """Ask the workers to leave; kill those still there after STOP_S (with what they started: their
        process groups) and remove the folder."""
        with contextlib.suppress(OSError):
            open(os.path.join(self.folder, "stop"), "w").close()
        deadline = time.monotonic() + STOP_S
        while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
        from tfcalc.measure.lifeline import end_lifeline

        end_lifeline(self.lifeline)


def serve(folder: str, rank: int) -> None:
    """A worker: run each request of the folder in turn (request-1.json, request-2.json, ...), marking each
    done; leave when the folder says stop, or is gone. A request that raises leaves the worker (exit 1)."""
    import traceback

    from tfcalc.measure.lifeline import die_with_parent

    die_with_parent()
    for k in range(1, sys.maxsize):
        path = os.path.join(folder, f"request-{k}.json")
        while not os.path.exists(path):
            if os.path.exists(os.path.join(folder, "stop")) or not os.path.isdir(folder):
                os._exit(0)  # at once: nothing to save, and a kept process group would slow the interpreter's exit
            time.sleep(POLL_S)
        with open(path, encoding="utf-8") as f:
            request = json.load(f)
        os.environ["MASTER_PORT"] = str(request["port"])  # read by the first run's rendezvous only
        sys.stderr.flush()
        with open(request["logs"][rank], "w", encoding="utf-8") as log:
            os.dup2(log.fileno(), 2)  # the rank's stderr, C++ (gloo) included, in the launch's log
        try:
            importlib.import_module(request["module"]).main(request["argv"])
        except BaseException:  # SystemExit included: the program's own exit ends a fresh rank too
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        sys.stderr.flush()
        open(os.path.join(folder, f"done-{k}-{rank}"), "w").close()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
