"""Where configs come from: the packaged YAML presets, the user's own YAML file, a Hugging Face
config.json (mapped by tfcalc.hf_config), and --set overrides.

A model argument is a path when it ends in .yaml, .yml or .json or contains a path separator;
otherwise it names a preset (file stem, or an alias listed in a preset's ``aliases``). Names are exact
(case aside): no fuzzy matching, but an unknown name gets the closest ones suggested.

Every problem raises ConfigError with one line that names the file and the field.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from tfcalc import hf_config
from tfcalc.config import FIELD_NAMES, ConfigError, ModelConfig, from_mapping, suggest

_META_KEYS = ("aliases",)  # allowed in a preset file, not part of ModelConfig


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML, plus floats without a dot such as 1e-5 (YAML 1.1, and so PyYAML, reads them as strings)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def preset_dir() -> Path:
    """tfcalc/presets inside an installed package; the repository's presets/ in a source checkout."""
    installed = Path(__file__).with_name("presets")
    return installed if installed.is_dir() else Path(__file__).resolve().parent.parent / "presets"


def preset_names() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.yaml"))


@lru_cache(maxsize=None)
def _aliases() -> dict[str, str]:
    """alias -> preset name, read from every preset's ``aliases`` list."""
    out = {}
    for name in preset_names():
        for alias in _read_yaml(preset_dir() / f"{name}.yaml").get("aliases") or []:
            out[str(alias).lower()] = name
    return out


def aliases_of(name: str) -> list[str]:
    return [alias for alias, target in _aliases().items() if target == name]


def is_path(spec: str) -> bool:
    return spec.lower().endswith((".yaml", ".yml", ".json")) or "/" in spec or os.sep in spec


def _read_text(path: Path, kind: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a {kind} file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read ({e})") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    text = _read_text(path, "YAML")
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty; expected a mapping of field: value")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of field: value, got a {type(data).__name__}")
    return data


read_yaml = _read_yaml  # public: tfcalc.devices reads a user's device file the same way


def resolve_preset_name(spec: str) -> str:
    """The preset file stem for a name or alias; ConfigError with suggestions when there is none."""
    names = preset_names()
    key = spec.strip().lower()
    if key in names:
        return key
    if key in _aliases():
        return _aliases()[key]
    if key in ("true", "false", "yes", "no", "1", "0"):  # `--json true`: the value went to the MODEL argument
        raise ConfigError(f"'{spec}' is not a preset: --json and the other flags take no value (write --json alone)")
    close = _close_names(key, names + list(_aliases()))
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise ConfigError(f"unknown preset '{spec}'{hint}; `tfcalc presets` lists them, or pass a path to a YAML file")


def _close_names(key: str, choices: list[str]) -> list[str]:
    import difflib

    squashed = {re.sub(r"[-_ .]", "", c): c for c in choices}  # 'gpt-2' -> 'gpt2'
    exact = squashed.get(re.sub(r"[-_ .]", "", key))
    return [exact] if exact else difflib.get_close_matches(key, choices, n=3, cutoff=0.6)


def parse_override(text: str) -> tuple[str, Any]:
    """'key=value' -> (key, value parsed as a YAML scalar: 12 -> int, true -> bool, null -> None)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got '{text}'")
    if key not in FIELD_NAMES:
        raise ConfigError(f"--set: unknown field '{key}'{suggest(key, FIELD_NAMES)}")
    try:
        value = yaml.load(raw, Loader=_Loader) if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(f"--set {key}: cannot read the value '{raw}'") from None
    if isinstance(value, (dict, list)):
        raise ConfigError(f"--set {key}: expected a single value, got '{raw}'")
    return key, value


def _config_from(data: dict[str, Any], origin: str, overrides: list[str]) -> ModelConfig:
    data = {k: v for k, v in data.items() if k not in _META_KEYS}
    for text in overrides:
        key, value = parse_override(text)
        data[key] = value
    try:
        return from_mapping(data)
    except ConfigError as e:
        raise ConfigError(f"{origin}: {e}") from None
    except TypeError as e:  # a dataclass argument error not caught by the checks above
        raise ConfigError(f"{origin}: {e}") from None


def apply_overrides(cfg: ModelConfig, overrides: list[str]) -> ModelConfig:
    """A config with --set overrides applied on top (each re-validated)."""
    import dataclasses

    data = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return _config_from(data, cfg.name, list(overrides))


def load_file(path: str | Path, overrides: list[str] = ()) -> ModelConfig:
    path = Path(path)
    if path.suffix.lower() == ".json":
        data = hf_config.config_fields(hf_config.parse_json(_read_text(path, "JSON"), path), path)
        return _config_from(data, path.name, list(overrides))
    data = _read_yaml(path)
    data.setdefault("name", path.stem)
    data.setdefault("source", str(path))
    return _config_from(data, path.name, list(overrides))


def load_preset(name: str, overrides: list[str] = ()) -> ModelConfig:
    name = resolve_preset_name(name)
    return _config_from(_read_yaml(preset_dir() / f"{name}.yaml"), f"preset {name}", list(overrides))


def load(spec: str, overrides: list[str] = ()) -> ModelConfig:
    """A preset name or alias, or a path to a YAML file or a Hugging Face config.json; then the --set
    overrides on top."""
    return load_file(spec, overrides) if is_path(spec) else load_preset(spec, overrides)
