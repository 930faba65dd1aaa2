"""Time every command of the tour (docs/commands.md) as a whole process, against `python -c "import torch"`.

Not a test: a benchmark to run by hand on a quiet machine, whose figures go into notes and issues.

    python benchmarks/tour.py                 # every tour command, 3 runs each
    python benchmarks/tour.py --runs 5 -k flops -k memory
    python benchmarks/tour.py --extra "tfcalc flops gpt3 --seq 2048 --measure --json"
    python benchmarks/tour.py --before /tmp/main-checkout   # before and after, interleaved, one run

Each run times the baseline and then every command once, in the same order (A B C ... A B C ...), so a
drift of the machine shows in all of them alike; the median over the runs is reported, with the ratio
to the baseline's median, and the 1-minute load average before and after (from /proc/loadavg: above
about 1.2 on a 2-core machine, other work is in the figures). Commands run from a scratch directory:
the tour's files are made there first (mine.yaml, my-model.yaml, from `tfcalc show`); a command naming
a file that cannot be made here (a downloaded config.json), or a CUDA device this machine lacks, is
skipped, and said so. stdout is
discarded; a command that exits non-zero is reported as failed. The default output of each command
is a table, as a person runs the tour: progress bars are off, since stderr is not a terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "python -c 'import torch'"
TARGETS = {  # issue 12: a command's whole process against the baseline
    "tfcalc flops gpt3 --seq 2048 --measure --json": 1.6,
    "tfcalc params gpt3 --json": 1.15,
    "tfcalc memory gpt2 --set n_layer=2 --seq 256 --measure --training --json": 10.0,
}
OWN_MEDIAN = {  # issue 12: the whole process against the median forward time it reports itself
    "tfcalc bench gpt2 --json": 10.0,
}


def tour_commands(readme: Path = ROOT / "docs" / "commands.md") -> list[str]:
    """The commands of the "A short tour" block (docs/commands.md), comments and redirections dropped."""
    block = re.search(r"## A short tour\n\n```bash\n(.*?)```", readme.read_text(encoding="utf-8"), re.S).group(1)
    commands = []
    for line in block.splitlines():
        command = line.split("  #", 1)[0].split(" #", 1)[0].strip()
        command = command.split(" > ", 1)[0].strip()
        if command.startswith("tfcalc "):
            commands.append(command)
    return commands


def _argv(command: str) -> list[str]:
    """A command as argv: `python` is this interpreter, `tfcalc` this interpreter's tfcalc."""
    words = shlex.split(command)
    if words[0] == "python":
        return [sys.executable] + words[1:]
    if words[0] == "tfcalc":
        return [sys.executable, "-m", "tfcalc"] + words[1:]
    return words


def _prepare(workdir: Path) -> None:
    """The files the tour names, made with tfcalc itself."""
    for name, model in (("mine.yaml", "llama2-7b"), ("my-model.yaml", "gpt2")):
        with open(workdir / name, "w", encoding="utf-8") as f:
            subprocess.run(_argv(f"tfcalc show {model}"), stdout=f, check=True, cwd=workdir)


def _missing_file(command: str, workdir: Path) -> str | None:
    for word in shlex.split(command)[1:]:
        if word.endswith((".yaml", ".json")) and not word.startswith("-"):
            path = Path(os.path.expanduser(word))
            if not (path if path.is_absolute() else workdir / path).exists():
                return word
    return None


def _time(command: str, workdir: Path, timeout: float, env: dict[str, str], reported: list[float]) -> float | None:
    """Seconds of the whole process; for a bench --json command, its reported median_s into reported."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(_argv(command), cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, env=env, text=True)
    except subprocess.TimeoutExpired:
        return None
    elapsed = time.perf_counter() - start
    if command in OWN_MEDIAN and proc.returncode == 0:
        data = json.loads(proc.stdout)
        reported.append(statistics.median(r["median_s"] for r in (data if isinstance(data, list) else [data])))
    return elapsed if proc.returncode in (0, 1) else None  # 1: a check that reports a mismatch still ran


def _has_cuda() -> bool:
    proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                          capture_output=True, text=True)
    return proc.stdout.strip() == "True"


def load() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def _median(samples: list[float | None]) -> float | None:
    ok = [t for t in samples if t is not None]
    return statistics.median(ok) if ok and len(ok) == len(samples) else None


def _report(times, reported, variants, skipped, runs, loads) -> None:
    base = {v: _median(times[v, BASELINE]) for v in variants}
    print(f"load average (1 min) before {loads[0]:.2f}, after {loads[1]:.2f}; {runs} runs, interleaved; medians")
    head = "".join(f"{v + ' s':>10}{'× torch':>9}" for v in variants)
    print(f"{head}  {'target':>7}  command")
    for command in dict.fromkeys(c for _, c in times):
        cells, mark = "", ""
        for v in variants:
            median = _median(times[v, command])
            cells += f"{'failed':>10}{'':>9}" if median is None else f"{median:10.2f}{median / base[v]:9.2f}"
        median = _median(times[variants[-1], command])
        target = TARGETS.get(command)
        if target is not None and median is not None:
            mark = f"≤{target:g}" + (" ✓" if median / base[variants[-1]] <= target else " ✗")
        print(f"{cells}  {mark:>7}  {command}")
        for v in variants:
            if reported.get((v, command)) and median is not None:
                own, limit = statistics.median(reported[v, command]), OWN_MEDIAN[command]
                whole = _median(times[v, command])
                print(f"{'':>{10 + 9}}  {'':>7}    {v}: own median forward {own:.3f} s; process / median "
                      f"{whole / own:.2f} (target ≤{limit:g} {'✓' if whole / own <= limit else '✗'})")
    for command, why in skipped.items():
        print(f"{'skipped':>10}  {command} ({why})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each command (default 3)")
    parser.add_argument("-k", action="append", default=[], help="only commands containing this text (repeatable)")
    parser.add_argument("--extra", action="append", default=[], help="a command to time beside the tour")
    parser.add_argument("--no-tour", action="store_true", help="time only --extra commands and the targets")
    parser.add_argument("--before", metavar="DIR", help="also time the tfcalc of this checkout (put first on "
                        "PYTHONPATH), interleaved with this one: before and after in one run")
    parser.add_argument("--timeout", type=float, default=600, help="seconds before a command counts as failed")
    args = parser.parse_args(argv)

    commands = ([] if args.no_tour else tour_commands()) + list(TARGETS) + list(OWN_MEDIAN) + args.extra
    commands = [c for c in dict.fromkeys(commands) if not args.k or any(k in c for k in args.k)]
    env = dict(os.environ, COLUMNS="140")
    envs = {"after": env} if not args.before else {
        "before": dict(env, PYTHONPATH=os.pathsep.join(filter(None, [args.before, env.get("PYTHONPATH")]))),
        "after": env}
    cuda = _has_cuda()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        _prepare(workdir)
        skipped = {c: f"{f} is not on this machine" for c in commands if (f := _missing_file(c, workdir))}
        skipped.update({c: "no CUDA device here" for c in commands if "--device cuda" in c and not cuda})
        timed = [BASELINE] + [c for c in commands if c not in skipped]
        times = {(v, c): [] for v in envs for c in timed}
        reported: dict[tuple[str, str], list[float]] = {(v, c): [] for v in envs for c in timed}
        loads = [load()]
        for run in range(args.runs):
            for command in timed:
                for v, variant_env in envs.items():
                    t = _time(command, workdir, args.timeout, variant_env, reported[v, command])
                    times[v, command].append(t)
                    print(f"run {run + 1}/{args.runs} {v}: {command}: {'failed' if t is None else f'{t:.2f} s'}",
                          file=sys.stderr)
        loads.append(load())
    _report(times, reported, list(envs), skipped, args.runs, loads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
