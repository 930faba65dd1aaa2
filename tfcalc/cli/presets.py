"""`tfcalc presets` lists the packaged presets; `tfcalc show` prints a resolved config as YAML."""

from __future__ import annotations

import sys
from typing import Annotated

from tfcalc.cli import render
from tfcalc.cli.options import Format, FormatOption, Json, Model, Overrides, output, switch
from tfcalc.cli.render import presets as view
from tfcalc.report import resolve
from tfcalc.report.presets import build_presets


def list_presets(format: FormatOption = Format.table, json_out: Json = False) -> None:
    """List the packaged presets with their key shapes and analytic parameter totals."""
    render.emit([build_presets()], output(format, json_out), view.document)


def show(model: Model, overrides: Overrides = None, json_out: Json = False,
         all_fields: Annotated[bool, switch("--all", help="Every field, the unset ones as null too (--json always "
                                           "lists them all).")] = False) -> None:
    """Print the resolved config (after --set overrides) as YAML: every field that is set, derived sizes written in
    (--all: the unset ones too, as null).

    The output is itself a valid config file: `tfcalc show gpt2 > my.yaml; tfcalc params my.yaml`.
    """
    ref = resolve(model, overrides or [])
    cfg, data = ref.cfg, ref.cfg.resolved()
    if not (all_fields or json_out):  # an unset field reads as null, its default: left out, the file the same
        data = {k: v for k, v in data.items() if v is not None}
    if json_out:
        render.print_json(data)
        return
    optional = (("d_head", cfg.d_head), ("n_kv_head", cfg.n_kv_head), ("d_ff", cfg.d_ff))
    derived = [f for f, given in optional if given is None]
    from tfcalc.cli.render.safe import safe

    # the label in a comment is made safe (a newline would end the comment); the values YAML quotes and escapes
    # itself, except the printable-to-YAML format characters (U+202E ...): allow_unicode only for safe text
    header = f"# tfcalc config: {safe(ref.label)}" + (f" (derived: {', '.join(derived)})" if derived else "") + "\n"
    text = _grouped_yaml(data, allow_unicode=True)
    if safe(text, len(text)) != text.replace("\n", "\\n"):
        text = _grouped_yaml(data, allow_unicode=False)  # every non-ASCII character escaped
    sys.stdout.write(header + text)


def _grouped_yaml(data: dict, allow_unicode: bool) -> str:
    """The fields as YAML, group by group (tfcalc.config_groups: the component each builds), a comment line
    naming each group."""
    import yaml

    from tfcalc.config_groups import grouped

    return "".join(f"# {name}\n" + yaml.safe_dump(part, sort_keys=False, allow_unicode=allow_unicode)
                   for name, part in grouped(data))
