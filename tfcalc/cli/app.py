"""The tfcalc command line: one Typer app, one module per command, every error one line on stderr.

Exit codes: 0 success; 1 a check failed (analytic and empirical counts disagree); 2 bad input
(unknown preset, bad file, bad flag value); 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 141
stdout closed by its reader (tfcalc.cli.interrupts).
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from tfcalc import __version__
from tfcalc.cli import interrupts, render, values
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
        return values.install(_no_flag_metavar(super().get_params(ctx)))

    def invoke(self, ctx):
        """Run the command; a broken pipe or Ctrl-C leaves as tfcalc's own exception, before Typer turns the
        one into exit 1 and the other into a silent exit 130 (tfcalc.cli.interrupts)."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise interrupts.BrokenPipe() from None
        except KeyboardInterrupt:
            raise interrupts.Stopped(interrupts.SIGINT) from None


class Group(typer.core.TyperGroup):
    def get_params(self, ctx):
        return values.install(_no_flag_metavar(super().get_params(ctx)))


# command -> (module under tfcalc.cli, function), in the order help lists them. A command's module (and
# what it imports: its report, its renderer) is imported only when that command runs, or for the
# listing of every command: `tfcalc params gpt3 --json` never pays for bench's or scan's imports.
COMMANDS = {
    "params": ("params", "params"), "presets": ("presets", "list_presets"), "show": ("presets", "show"),
    "flops": ("flops", "flops"), "memory": ("memory", "memory"), "bench": ("bench", "bench"),
    # bench's other modes: `tfcalc bench decode ...` and `tfcalc bench ranks ...` (run() joins the two words)
    "bench decode": ("bench_modes", "bench_decode"), "bench ranks": ("bench_modes", "bench_ranks"),
    "infer": ("infer", "infer"), "plan": ("plan", "plan"), "snapshot": ("snapshot", "snapshot"),
    "check": ("snapshot", "check"), "compare": ("compare", "compare"), "scan": ("scan", "scan"),
    "devices": ("devices", "devices"),
}


def make_app(names: list[str] | None = None) -> typer.Typer:
    """The Typer app with the named commands (default: all). The root callback keeps it a group, so
    `tfcalc params ...` parses, helps and fails the same with one command registered as with all."""
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
    app.callback()(_root)
    for name in names or COMMANDS:
        module, function = COMMANDS[name]
        app.command(name, cls=Command)(getattr(importlib.import_module(f"tfcalc.cli.{module}"), function))
    return app


def _commands_for(argv: list[str]) -> list[str] | None:
    """Only the command being run, when the first argument names one; every command otherwise (root
    help, a typo to suggest a name for, shell completion, which reads the whole tree)."""
    completing = any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ)
    return [argv[0]] if argv and argv[0] in COMMANDS and not completing else None


def _imports_torch(argv: list[str]) -> bool:
    """The runs that import torch before their first progress bar: bench's modes, --measure, params (which
    builds on meta unless --no-measure); not help."""
    if not argv or argv[0] not in COMMANDS or {"-h", "--help"} & set(argv):
        return False
    return (argv[0].startswith("bench") or "--measure" in argv
            or (argv[0] == "params" and "--no-measure" not in argv))


def _version(value: bool) -> None:
    if value:
        print(f"tfcalc {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """How many parameters, how many FLOPs, how much memory, and how fast: for real PyTorch transformers."""


def _fail(message: str, code: int) -> int:
    render.error(message)
    return code


def run(argv: list[str] | None = None) -> int:
    """Run the app and turn every expected failure into one line on stderr and an exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if interrupts.closed_streams():  # `tfcalc ... >&-`: nowhere to write the answer
        return _fail("stdout is closed (>&-): there is nowhere to write the answer; redirect it to a file or "
                     "/dev/null instead", 2)
    if len(argv) > 1 and argv[0] == "bench" and argv[1] in ("decode", "ranks"):
        argv = [f"bench {argv[1]}", *argv[2:]]  # a command of two words, so its usage reads `tfcalc bench decode`
    render.prepare_streams()
    if _imports_torch(argv):  # at a terminal, a line at once: the imports take seconds on a busy machine
        render.starting(argv[0])
    try:
        result = make_app(_commands_for(argv))(args=argv, prog_name="tfcalc", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except typer.Exit as e:
        return e.exit_code
    except CliError as e:  # bad flags, missing arguments, bad values
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError":
            # Typer's Rich help prints itself while the error is built (ctx.get_help() then returns ""):
            # print only what was not yet shown, so bare `tfcalc` shows the help once
            text = e.format_message()
            if text.strip():
                print(text)
            return 0
        command = f"{ctx.command_path}: " if ctx is not None and ctx.command_path != "tfcalc" else ""
        text = e.format_message()
        own = getattr(e, "message", "")
        if type(e).__name__ == "BadParameter" and isinstance(own, str) and own.startswith("--"):
            text = own  # a parser's message that names its flag itself (tfcalc.cli.options.bounded_count)
        return _fail(command + " ".join(text.split()), getattr(e, "exit_code", 2) or 2)
    except InputError as e:
        return _fail(str(e), 2)
    except (typer.Abort, KeyboardInterrupt):
        render.stopped("interrupted")
        return 130
    except interrupts.Stopped as e:  # not an error of the input: "tfcalc: interrupted", exit 128 + signal
        render.stopped(e.message)
        return e.exit_code
    except (interrupts.BrokenPipe, BrokenPipeError):
        interrupts.silence_stdout()
        return interrupts.BROKEN_PIPE_EXIT
    except OSError as e:
        if interrupts.stdout_failed(e):  # /dev/full as stdout, a disk that filled: not a bug of tfcalc's
            interrupts.silence_stdout()
            return _fail(f"cannot write the answer to stdout ({e.strerror or e})", 2)
        if os.environ.get("TFCALC_DEBUG"):
            raise
        return _fail(f"internal error: {type(e).__name__}: {str(e)[:500]} (set TFCALC_DEBUG=1 for the traceback)", 1)
    except Exception as e:  # a bug: keep the one-line promise, but let developers see the traceback
        if "TORCH_LOGS" in str(e) and os.environ.get("TORCH_LOGS"):  # torch refuses the variable at import
            return _fail(f"torch cannot start with TORCH_LOGS={os.environ['TORCH_LOGS']!r}: {str(e)[:150]}; unset "
                         "it or give names torch knows", 2)
        if os.environ.get("TFCALC_DEBUG"):
            raise
        return _fail(f"internal error: {type(e).__name__}: {str(e)[:500]} (set TFCALC_DEBUG=1 for the traceback)", 1)


def _tune_gc() -> None:
    """Collect cycles less often in this short-lived process. CPython runs a collection after every 700
    net container allocations, and a full one (every tracked object, some 165,000 once torch is
    imported) every 100 of those; importing torch and building a 96-block model on meta trigger
    several, for nothing: tfcalc makes few reference cycles. mypy's command line does the same
    (mypy/main.py, gc.set_threshold(200 * 1000, 30, 30)). The library API leaves the collector alone."""
    import gc

    gc.set_threshold(200_000, 30, 30)


def _exit(code: int) -> None:
    """Exit without the interpreter's teardown, which after importing torch costs about as much as
    anything tfcalc params does (every module torch loaded is torn down and a last full collection walks
    every object; benchmarks/tour.py times the command). The atexit handlers still run (torch's own,
    tempfile's), and the standard streams are flushed; what is skipped is module teardown and the final
    collection, which tfcalc's output does not depend on. Instagram's "Dismissing Python Garbage
    Collection" (2017) does the same for the same reason (atexit.register(os._exit, 0)).

    Running the handlers first leans on CPython's private ``atexit._run_exitfuncs`` (Modules/atexitmodule.c;
    there since Python 3.0): where an interpreter lacks it, the plain exit runs instead (``sys.exit``, the
    full teardown), since skipping the handlers could lose what they write."""
    import atexit

    run_handlers = getattr(atexit, "_run_exitfuncs", None)
    if callable(run_handlers):
        run_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: closed when tfcalc started (>&-, 2>&-)
                stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said there
            pass
    if not callable(run_handlers):
        sys.exit(code)  # the plain exit: the handlers, then the teardown
    os._exit(code)


def main() -> None:
    _tune_gc()
    interrupts.install()
    interrupts.hold_closed_fds()
    code = run()
    try:
        if sys.stdout is not None:
            sys.stdout.flush()  # a reader that closed the pipe after the last write shows up here
    except BrokenPipeError:
        interrupts.silence_stdout()
        code = code or interrupts.BROKEN_PIPE_EXIT
    except OSError as e:  # a full disk, /dev/full: the last of the answer could not be written
        interrupts.silence_stdout()
        code = code or _fail(f"cannot write the answer to stdout ({e.strerror or e})", 2)
    _exit(code)
