"""Every option of every command, defined once: name, short form, default and help (Typer reads the
help from here). Flags show no metavar. Defaults that depend on the command follow one stated rule:

- ``--dtype``: bf16 for estimates and for runs on a GPU, fp32 for runs on a CPU (few CPUs have fast
  bf16 matmuls); see tfcalc.workload.default_dtype.
- ``--device``: where a measured run happens; cpu, except `tfcalc flops --measure`, which counts on meta
  (FlopCounterMode needs shapes only, so nothing is allocated).
"""

from __future__ import annotations

import enum
from typing import Annotated, Optional

import typer

from tfcalc import amounts
from tfcalc.cli.render import FORMATS, Output
from tfcalc.count.model.dtypes import DTYPES
from tfcalc.errors import InputError


def switch(*names: str, help: str) -> typer.models.OptionInfo:
    """An on/off option (``--json``, ``--measure``): no metavar, so the help shows the flag alone. Every command's
    own switches are made with it too (tfcalc.cli.flops, bench, presets)."""
    return typer.Option(*names, help=help, metavar="")


def described(*names: str, help: str, metavar: str, **extra) -> typer.models.OptionInfo:
    """An option whose help states its default itself ("[default: off]"): the metavar names its values (on|off,
    auto|alltoall|allgather, P:D, N), and Typer's own default line, which would print the None that stands for
    "not given", is left out. ``extra``: typer.Option's other arguments (a parser)."""
    return typer.Option(*names, help=help, metavar=metavar, show_default=False, **extra)


Models = Annotated[list[str], typer.Argument(
    help="Preset names or aliases (see `tfcalc presets`), or paths to YAML or Hugging Face config.json files.",
    show_default=False, metavar="MODEL...")]
Model = Annotated[str, typer.Argument(
    help="A preset name or alias (see `tfcalc presets`), or a path to a YAML file or a Hugging Face config.json.",
    show_default=False, metavar="MODEL")]
BenchModel = Annotated[Optional[str], typer.Argument(
    help="A preset name or alias (see `tfcalc presets`), or a path to a YAML file or a Hugging Face config.json "
    "[default: gpt2, which times in seconds on any device].", show_default=False, metavar="[MODEL]")]
DEFAULT_BENCH_MODEL = "gpt2"  # 124M parameters: seconds on a laptop CPU, fits any GPU


def bench_model(model: Optional[str], command: str, device: Optional[str]):
    """(the model a timed command runs, say()): the one named, else DEFAULT_BENCH_MODEL; say() writes, for
    the default, one line with how to choose (the user asked to time a device, not a model). The caller
    says it once every option is checked, just before the run, so that a refusal stays the one line."""
    if model is not None:
        return model, lambda: None
    return DEFAULT_BENCH_MODEL, lambda: _say_default(command, device)


def _say_default(command: str, device: Optional[str]) -> None:
    from tfcalc.cli import render

    where = device or "cpu"
    render.note(f"no model named: timing {DEFAULT_BENCH_MODEL} (124M parameters) on {where}; name one to choose, "
                f"e.g. `tfcalc {command} llama2-7b --device {where}` (`tfcalc presets` lists them)")


Overrides = Annotated[Optional[list[str]], typer.Option(
    "--set", help="Override a config field, KEY=VALUE (repeatable), e.g. --set n_layer=2 --set d_head=128.",
    metavar="KEY=VALUE", show_default=False)]

# ---------- output ----------

Format = enum.Enum("Format", {name: name for name in FORMATS}, type=str)
FormatOption = Annotated[Format, typer.Option(
    "--format", "-f", help="table (for people), json (the stable contract), markdown (to paste), csv (raw values).",
    metavar="FORMAT")]
Json = Annotated[bool, switch("--json", help="Print JSON: the same as --format json.")]
Exact = Annotated[bool, switch("--exact", help="Whole numbers (FLOPs, bytes, counts) instead of 291.6 GFLOP, 2 GiB.")]
Verbose = Annotated[bool, switch("--verbose", "-v", help="Every tensor, matmul or term, not only the groups.")]
Eager = Annotated[bool, switch(
    "--eager", help="Measured decode steps uncaptured, every kernel launched from Python. Default on CUDA: each step "
    "captured once per cache bucket in a CUDA graph and replayed (mode \"graph\"); the CPU always runs eager. The "
    "mode that ran is reported (JSON key \"mode\").")]


def table_option(*names: str):
    """--table, whose help names the command's tables (the first is the one CSV writes by default)."""
    return Annotated[Optional[str], typer.Option(
        "--table", help=f"The one table to write, by name: {', '.join(names)} [default: csv writes the first of "
        "these the report has (summary, for several models); table and markdown write every table].",
        show_default=False, metavar="NAME")]


def output(format: Format, json_out: bool, exact: bool = False, verbose: bool = False,
           table: str | None = None) -> Output:
    if json_out and format.value not in ("table", "json"):
        raise InputError(f"--json and --format {format.value} ask for two formats; give one")
    if table is not None and (json_out or format.value == "json"):
        raise InputError("--table picks a table of the table, markdown or csv output; JSON holds everything")
    return Output("json" if json_out else format.value, exact, verbose, table)


# ---------- workload ----------

DTypeName = enum.Enum("DTypeName", {name: name for name in DTYPES}, type=str)  # fp32, tf32, ..., int4
LENGTHS_RULE = "4k = 4,096: a length's k is 1,024 and M 1,048,576, as model cards count context"
COUNTS_RULE = "1k = 1,000: a count is decimal"


def length_value(text: str) -> int:
    try:
        return amounts.length(text)
    except InputError as e:  # Typer would write a ValueError as "Value error, ..."
        raise typer.BadParameter(str(e)) from None


def count_value(text: str) -> int:
    try:
        return amounts.count(text)
    except InputError as e:
        raise typer.BadParameter(str(e)) from None


def bounded_count(flag: str, low: int = 1):
    """The parser of a count option with a bound (tfcalc.measure.bounds): a count as people type it (1k =
    1,000, 1e6), from low to the flag's largest, else typer.BadParameter naming the flag in one line."""
    from tfcalc.measure import bounds

    def parse(text) -> int:
        try:
            return bounds.check(flag, amounts.count(text), low)
        except InputError as e:
            message = str(e)
            raise typer.BadParameter(message if flag in message else f"{flag}: {message}") from None

    parse.__name__ = f"parse_{flag.strip('-').replace('-', '_')}"
    return parse


def bounded_size(flag: str):
    """The parser of a size in bytes with a bound (--copy-size): the text, once it reads as a size within
    the flag's bound (tfcalc.count.model.budget.parse_bytes), else typer.BadParameter naming the flag."""
    from tfcalc.count.model.budget import parse_bytes
    from tfcalc.measure import bounds

    def parse(text) -> str:
        try:
            bounds.check(flag, parse_bytes(str(text), flag))
        except InputError as e:
            message = str(e)
            raise typer.BadParameter(message if flag in message else f"{flag}: {message}") from None
        return str(text)

    return parse


def bound_help(flag: str) -> str:
    """'at most 10,000, what a run of a day could use': the bound of a count flag (tfcalc.measure.bounds), for
    the help of every flag that bounded_count checks, here and in the commands' own options."""
    from tfcalc.measure.bounds import help_bound

    return help_bound(flag, "bytes" if flag == "--copy-size" else "")


Batch = Annotated[int, typer.Option("--batch", "-b", help=f"Sequences per batch (B); {COUNTS_RULE}.", metavar="N",
                                    parser=count_value)]
Seq = Annotated[Optional[int], typer.Option(
    "--seq", "-s", help="Sequence length T in tokens (an encoder-decoder's target length); "
    f"{LENGTHS_RULE} [default: the model's context length].", show_default=False, metavar="T", parser=length_value)]
Seqs = Annotated[Optional[str], typer.Option(
    "--seq", "-s", help="Sequence lengths: one (1024), several (256,1k,4k) or a doubling range (256..4k); "
    f"{LENGTHS_RULE}.", show_default=False, metavar="T[,T...]|A..B")]
SrcSeq = Annotated[Optional[int], typer.Option(
    "--src-seq", help=f"Encoder-decoder models only: source length S; {LENGTHS_RULE} [default: the --seq value].",
    show_default=False, metavar="S", parser=length_value)]
DType = Annotated[Optional[DTypeName], typer.Option(
    "--dtype", help=f"Storage dtype of weights and activations: {', '.join(DTYPES)} (int8/int4/fp8 count "
    "storage, compute in bf16) [default: bf16; fp32 for runs on a CPU].", show_default=False, metavar="DTYPE")]
Device = Annotated[Optional[str], typer.Option(
    "--device", help="Where a measured run happens: cpu, cuda, cuda:N, mps (flops --measure also meta) "
    "[default: cpu; meta for flops].", show_default=False)]
Batches = Annotated[Optional[str], typer.Option(
    "--batch", "-b", help="Batch sizes: one (8), several (1,8,64) or a doubling range (1..256) [default: 1].",
    show_default=False, metavar="B[,B...]|A..B")]
Gen = Annotated[int, typer.Option("--gen", help="Tokens to generate per sequence (the prefill yields the first); "
                                  f"{LENGTHS_RULE}; with --measure {bound_help('--gen')}.", parser=length_value,
                                  metavar="N")]
KvDType = Annotated[Optional[DTypeName], typer.Option(
    "--kv-dtype", help="Dtype of the KV cache, apart from the weights' [default: the weights' dtype; bf16 for "
    "int8/int4/fp8 weights].", show_default=False, metavar="DTYPE")]
GroupSize = Annotated[Optional[int], typer.Option(
    "--group-size", help="int8/int4/fp8 weights: weights per fp16 scale (and zero point) [default: 128 for int4 "
    "(with zero points), per output row for int8 and fp8].", show_default=False, metavar="N")]
DeviceSpec = Annotated[Optional[str], typer.Option(
    "--device-spec", help="The device to predict for: a key from the datasheet table (h100-sxm, a100-80gb, ...), "
    "a YAML file with your own (`tfcalc devices` lists the table) [default: h100-sxm].", show_default=False,
    metavar="KEY|FILE")]
Warmup = Annotated[int, typer.Option("--warmup", help="Measured runs: untimed calls before timing; "
                                     f"{bound_help('--warmup')}.", metavar="N", parser=bounded_count("--warmup", 0))]
Repeat = Annotated[int, typer.Option("--repeat", help="Measured runs: timed calls; median, p10 and p90 over them "
                                     f"(decode: every step is one); {bound_help('--repeat')}.", metavar="N",
                                     parser=bounded_count("--repeat"))]
CopySize = Annotated[Optional[str], typer.Option(
    "--copy-size", help="Measured decoding: bytes of the buffer that measures the bandwidth ceiling, "
    f"{bound_help('--copy-size')} [default: 256MiB on CPU, 1GiB on GPUs].", show_default=False, metavar="SIZE",
    parser=bounded_size("--copy-size"))]
MatmulSize = Annotated[Optional[int], typer.Option(
    "--matmul-size", help="n of the n×n matmul that measures the ceiling; "
    f"{bound_help('--matmul-size')} [default: 2048 on CPU, 8192 on GPUs].", show_default=False, metavar="N",
    parser=bounded_count("--matmul-size"))]
Measure = Annotated[bool, switch("--measure", help="Also run the real module and put the measurement beside "
                                "the estimate.")]
# the performance model's two overrides (tfcalc.count.perf), the same for plan and infer
MatmulEfficiency = Annotated[Optional[float], typer.Option(
    "--matmul-efficiency", help="Run every matmul at this share of the datasheet peak instead of the GEMM-shape "
    "model (tile and wave quantization); the rest of the model stays.", show_default=False, metavar="F")]
BandwidthEfficiency = Annotated[Optional[float], typer.Option(
    "--bandwidth-efficiency", help="Share of the datasheet memory bandwidth kernels reach [default: the "
    "device's, 0.85].", show_default=False, metavar="F")]
RequireFit = Annotated[bool, switch("--require-fit", help="For scripts: exit 1 (after the answer) when it does not "
                                   "fit; 0 when it does.")]
Training = Annotated[bool, switch("--training", help="A training step (forward, backward, optimizer), not inference.")]


def warn_past_context(ref, seq: Optional[int], gen: Optional[int] = None) -> None:
    """One line on stderr when a length (--seq, or --seq + --gen) goes past the model's context
    (max_seq_len): the figures are arithmetic at that length, which the model as configured could not
    run. The lengths are range-checked here first (tfcalc.workload.check_size), so a length the range
    check refuses gets its one error line and no warning before it: the one guard for every command."""
    from tfcalc.workload import check_size

    if seq is None:
        return
    check_size("--seq", seq)
    what, length = "--seq", seq
    if gen is not None:
        check_size("--gen", gen)
        what, length = f"--seq + --gen = {seq:,} + {gen:,} =", seq + gen
    context = ref.cfg.max_seq_len
    if length > context:
        from tfcalc.cli import render

        render.warn(f"{ref.label}: {what} {length:,} is past the model's context of {context:,} tokens; counted "
                    "anyway, as if it had that many positions")


def parse_lengths(text: str, option: str = "--seq") -> list[int]:
    """Sequence lengths as typed: '256,1024,4k' -> those, in that order; '128..1k' -> 128, 256, 512,
    1024 (doubling; the end is included even off the doubling). Lengths scale k by 1,024, and --batch
    (a count) by 1,000 (tfcalc.amounts). InputError (one line) otherwise."""
    from tfcalc.workload import MAX_SIZE

    scale = amounts.COUNT if option == "--batch" else amounts.LENGTH

    def read(part: str) -> int:
        try:
            return amounts.parse(part, scale)
        except InputError:  # said below for the whole text, the form it takes
            raise ValueError(part) from None
    text = text.strip()
    try:
        if ".." in text:
            lo_text, hi_text = text.split("..", 1)
            lo, hi = read(lo_text), read(hi_text)
            if not 1 <= lo <= hi <= MAX_SIZE:
                raise InputError(f"{option}: expected START..END with 1 <= START <= END <= {MAX_SIZE:,}; got '{text}'")
            seqs = []
            while lo < hi:
                seqs.append(lo)
                lo *= 2
            return seqs + [hi]
        parts = text.split(",")
        if any(not p.strip() for p in parts):
            raise ValueError
        seqs = [read(p) for p in parts]
    except InputError:  # an InputError is a ValueError: not to be replaced by the generic message below
        raise
    except ValueError:
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise InputError(f"{option}: expected integers separated by commas (4k: 4,096 as a length, 1,000 as a "
                         f"count), or START..END; got '{shown}'") from None
    if any(not 1 <= s <= MAX_SIZE for s in seqs):
        what = "batch sizes" if option == "--batch" else "sequence lengths"
        raise InputError(f"{option}: {what} must be between 1 and {MAX_SIZE:,}")
    return seqs


# ---------- parallel layouts: shared by plan and bench --nproc ----------

Nproc = Annotated[Optional[int], typer.Option(
    "--nproc", help="Local torch.distributed ranks to run (gloo on the CPU, NCCL with one GPU each; the same "
    "program runs under torchrun) [plan --measure: 2].", show_default=False, metavar="N")]
TP = Annotated[Optional[int], typer.Option("--tp", help="Tensor-parallel degree (Megatron column/row splits).",
                                           show_default=False, metavar="T")]
Zero = Annotated[Optional[int], typer.Option(
    "--zero", help="ZeRO stage: 0 plain data parallel (DDP), 1 optimizer states, 2 + gradients, 3 + weights (FSDP) "
    "[default: 0; a search tries each].", show_default=False, metavar="0|1|2|3")]
FSDP = Annotated[bool, switch("--fsdp", help="Shard everything over the data-parallel ranks: the same as --zero 3.")]
SequenceParallel = Annotated[bool, switch(
    "--sequence-parallel", help="Split norms and dropout along the sequence over the TP ranks (Korthikanti et al. "
    "2022).")]


def zero_stage(zero: Optional[int], fsdp: bool) -> Optional[int]:
    """--zero, or 3 for --fsdp (the two must not contradict each other); None when neither is given."""
    if fsdp and zero not in (None, 3):
        raise InputError(f"--fsdp is ZeRO-3; it contradicts --zero {zero}")
    return 3 if fsdp else zero
