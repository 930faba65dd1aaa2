"""The tfcalc command line: one Typer app, one module per command, every error one line on stderr.

Exit codes: 0 success; 1 a check failed (analytic and empirical counts disagree); 2 bad input
(unknown preset, bad file, bad flag value); 130 interrupted.
"""

from __future__ import annotations

import os
import sys

import typer

from tfcalc import __version__
from tfcalc.cli import bench, compare, flops, memory, params, plan, presets, render, scan, snapshot
from tfcalc.errors import InputError

try:  # Typer vendors Click in recent releases; its errors then derive from TyperException
    from typer import TyperException as CliError
except ImportError:  # pragma: no cover - older Typer on the click package
    from click import ClickException as CliError  # type: ignore[no-redef]

def _no_flag_metavar(params: list) -> list:
    """Flags take no value, so their help shows none (Typer writes '<bool>' beside each by default)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class Command(typer.core.TyperCommand):
    def get_params(self, ctx):
        return _no_flag_metavar(super().get_params(ctx))


class Group(typer.core.TyperGroup):
    def get_params(self, ctx):
        return _no_flag_metavar(super().get_params(ctx))


app = typer.Typer(
    cls=Group,
    name="tfcalc",
    help="How many parameters, how many FLOPs, how much memory, and how fast: for real PyTorch transformers.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="markdown",  # docstring paragraphs reflow to the terminal; [brackets] stay literal
)
app.command("params", cls=Command)(params.params)
app.command("presets", cls=Command)(presets.list_presets)
app.command("show", cls=Command)(presets.show)
app.command("flops", cls=Command)(flops.flops)
app.command("memory", cls=Command)(memory.memory)
app.command("bench", cls=Command)(bench.bench)
app.command("plan", cls=Command)(plan.plan)
app.command("snapshot", cls=Command)(snapshot.snapshot)
app.command("check", cls=Command)(snapshot.check)
app.command("compare", cls=Command)(compare.compare)
app.command("scan", cls=Command)(scan.scan)


def _version(value: bool) -> None:
    if value:
        print(f"tfcalc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """How many parameters, how many FLOPs, how much memory, and how fast: for real PyTorch transformers."""


def _fail(message: str, code: int) -> int:
    render.error(message)
    return code


def run(argv: list[str] | None = None) -> int:
    """Run the app and turn every expected failure into one line on stderr and an exit code."""
    try:
        result = app(args=argv, prog_name="tfcalc", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except typer.Exit as e:
        return e.exit_code
    except CliError as e:  # bad flags, missing arguments, bad values
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())
            return 0
        command = f"{ctx.command_path}: " if ctx is not None and ctx.command_path != "tfcalc" else ""
        return _fail(command + " ".join(e.format_message().split()), getattr(e, "exit_code", 2) or 2)
    except InputError as e:
        return _fail(str(e), 2)
    except (typer.Abort, KeyboardInterrupt):
        return _fail("interrupted", 130)
    except Exception as e:  # a bug: keep the one-line promise, but let developers see the traceback
        if os.environ.get("TFCALC_DEBUG"):
            raise
        return _fail(f"internal error: {type(e).__name__}: {e} (set TFCALC_DEBUG=1 for the traceback)", 1)


def main() -> None:
    sys.exit(run())
