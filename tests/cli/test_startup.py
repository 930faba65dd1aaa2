"""Start-up: a command imports what it runs and nothing more (tfcalc.cli.app builds only the command
asked for; JSON output never imports Rich), and the whole app is still there for help and typos."""

import atexit
import subprocess
import sys

import pytest

from tfcalc.cli import app


def _modules_after(*argv: str) -> set[str]:
    code = ("import sys; from tfcalc.cli.app import run; rc = run(%r); "
            "sys.stderr.write(' '.join(sorted(sys.modules)))" % (list(argv),))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stderr.split())


def test_json_output_imports_only_its_command_and_no_rich():
    loaded = _modules_after("params", "gpt2", "--no-measure", "--json")
    assert "tfcalc.cli.params" in loaded
    others = {m for m in loaded if m.startswith("tfcalc.cli.") and m.split(".")[2] in
              ("bench", "flops", "memory", "scan", "compare", "snapshot", "presets")}
    assert not others, others
    assert not any(m == "rich" or m.startswith("rich.") for m in loaded)
    assert "torch" not in loaded  # --no-measure: arithmetic only


def test_help_lists_every_command_and_a_typo_is_answered(cli):
    r = cli("--help")
    assert r.code == 0 and all(name in r.out for name in ("params", "flops", "memory", "bench", "scan", "check"))
    r = cli("parms", "gpt2")
    assert r.code == 2 and "Did you mean 'params'" in r.err
    r = cli("bench", "--help")
    assert r.code == 0 and "--min-time" in r.out


@pytest.mark.parametrize("patch", ["", "del atexit._run_exitfuncs; "], ids=["quick", "private-helper-missing"])
def test_the_quick_exit_keeps_the_exit_code_the_output_and_atexit_handlers(tmp_path, cli, patch):
    """main() leaves through os._exit (no interpreter teardown): after the atexit handlers, with every
    byte of output flushed and the command's exit code. Without CPython's private atexit._run_exitfuncs
    it takes the plain exit, with the same handlers, output and code."""
    marker = tmp_path / "atexit-ran"
    code = ("import atexit, sys; atexit.register(lambda: open(%r, 'w').write('ran')); %s"
            "sys.argv = ['tfcalc'] + sys.argv[1:]; from tfcalc.cli.app import main; main()" % (str(marker), patch))
    args = ["params", "gpt2", "llama2-7b", "--no-measure", "--verbose", "--format", "csv"]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=120)
    assert proc.returncode == 0 and marker.read_text() == "ran"
    assert proc.stdout.decode() == cli(*args).out  # all of it, flushed (bytes: CSV ends its rows in CRLF)
    proc = subprocess.run([sys.executable, "-c", code, "params", "no-such-model"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("tfcalc: error:")


def test_the_quick_exit_falls_back_to_sys_exit_without_the_private_helper(monkeypatch):
    """In process: with atexit._run_exitfuncs present, the handlers run and os._exit leaves; without it,
    sys.exit does (the interpreter then runs the handlers itself) and os._exit is never called."""
    calls = []

    class Left(Exception):
        pass

    def fake_os_exit(code):
        calls.append(("os._exit", code))
        raise Left

    monkeypatch.setattr(app.os, "_exit", fake_os_exit)
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: calls.append(("handlers",)))
    with pytest.raises(Left):
        app._exit(3)
    assert calls == [("handlers",), ("os._exit", 3)]
    calls.clear()
    monkeypatch.delattr(atexit, "_run_exitfuncs")
    with pytest.raises(SystemExit) as left:
        app._exit(3)
    assert left.value.code == 3 and calls == []


@pytest.mark.parametrize("argv", [
    ("plan", "llama2-70b", "--gpus", "auto", "--json"), ("plan", "llama2-7b", "--tp", "2", "--dp", "4"),
    ("memory", "llama2-7b", "--training", "--batch", "2"), ("infer", "llama-4-scout", "--json"),
    ("scan", "llama2-7b", "--json"), ("flops", "gpt2", "--seq", "1k"), ("params", "gpt3", "--no-measure"),
], ids=lambda argv: " ".join(argv[:2]))
def test_analytic_commands_import_neither_torch_nor_pydantic(argv):
    """Arithmetic only: no torch; and no pydantic, which typer imports to convert option values unless
    tfcalc.cli.values converts them (about 0.2 s of every command)."""
    loaded = _modules_after(*argv)
    assert "torch" not in loaded and "pydantic" not in loaded


def _typer_params():
    """(command, parameter) for every option and argument of every command."""
    import typer

    command = typer.main.get_command(app.make_app())
    return [(name, p) for name, sub in command.commands.items() for p in sub.params]


VALUES = ["1", "0", "-3", "+7", "007", "1k", "12.5", ".5", "1e3", "1e400", "nan", "inf", " 4", "٣", "abc", "", "bf16",
          "BF16", "flash", "json", "table", "full", "adam", "x" * 120, ("1", "2"), ["a", "b"], ("1.5", "2"), None]


def _convert(runtime, value, param):
    from typer import BadParameter

    try:
        return "ok", runtime.coerce(value, param=param, ctx=None)
    except (BadParameter, ValueError) as e:  # ValueError: tfcalc's parsers (InputError)
        return "error", type(e).__name__, str(e)


def test_plain_conversions_equal_typers_own_for_every_option():
    """Every option of every command, valid and hostile values: tfcalc.cli.values converts to what
    typer's pydantic adapter converts to, and fails with the same message where it fails."""
    from typer._coercion import build_runtime_param

    from tfcalc.cli.values import PlainValue

    checked = 0
    for _, param in _typer_params():
        if param.type_descriptor.annotation is bool:
            continue
        theirs = build_runtime_param(param.type_descriptor)
        ours = PlainValue(param.type_descriptor, build_runtime_param)
        multi = param.multiple or param.nargs == -1
        for value in VALUES:
            if isinstance(value, (tuple, list)) != (multi or param.nargs > 1) and value is not None:
                continue  # click hands a parameter only values of its arity
            assert repr(_convert(ours, value, param)) == repr(_convert(theirs, value, param)), (param.name, value)
            checked += 1
    assert checked > 500


def test_without_typers_private_converter_the_plain_path_runs(monkeypatch, cli):
    """Where typer's internals differ (no typer._coercion.build_runtime_param, or parameters without
    _runtime_param), install leaves every parameter as typer made it, and commands answer the same."""
    import typer._coercion

    from tfcalc.cli import values

    expected = cli("plan", "llama2-7b", "--json").out
    monkeypatch.delattr(typer._coercion, "build_runtime_param")
    params = [p for _, p in _typer_params()]
    assert values.install(params) == params and all(p._runtime_param is None for p in params)
    monkeypatch.undo()

    class Bare:  # a parameter of another typer: nothing to replace
        type_descriptor = None

    bare = Bare()
    assert values.install([bare]) == [bare] and not hasattr(bare, "_runtime_param")
    assert cli("plan", "llama2-7b", "--json").out == expected
