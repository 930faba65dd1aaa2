"""Where configs come from: the packaged YAML presets, the user's own YAML file, a Hugging Face
config.json (mapped by tfcalc.hf_config), and --set overrides.

A model argument is a path when it ends in .yaml, .yml or .json or contains a path separator;
otherwise it names a preset (file stem, or an alias listed in a preset's ``aliases``). Names are exact
(case aside): no fuzzy matching, but an unknown name gets the closest ones suggested.

Every problem raises ConfigError with one line that names the file and the field.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import yaml

from tfcalc import hub_cache, reading, yaml_load
from tfcalc.config import FIELD_NAMES, LIST_FIELDS, ConfigError, ModelConfig, from_mapping, suggest
from tfcalc.errors import shown, shown_path

_META_KEYS = ("aliases",)  # allowed in a preset file, not part of ModelConfig


_Loader = yaml_load.Loader  # safe YAML, guarded against alias bombs, deep nesting and duplicate keys


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
        for alias in yaml_load.read_mapping(preset_dir() / f"{name}.yaml").get("aliases") or []:
            out[str(alias).lower()] = name
    return out


def aliases_of(name: str) -> list[str]:
    return [alias for alias, target in _aliases().items() if target == name]


def is_path(spec: str) -> bool:
    return spec.lower().endswith((".yaml", ".yml", ".json")) or "/" in spec or os.sep in spec


def resolve_preset_name(spec: str) -> str:
    """The preset file stem for a name or alias; ConfigError with suggestions when there is none."""
    names = preset_names()
    key = spec.strip().lower()
    if key in names:
        return key
    if key in _aliases():
        return _aliases()[key]
    if key in ("true", "false", "yes", "no", "1", "0"):  # `--json true`: the value went to the MODEL argument
        raise ConfigError(f"{shown(spec)} is not a preset: --json and the other flags take no value "
                          "(write --json alone)")
    close = _close_names(key, names + list(_aliases()))
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise ConfigError(f"unknown preset {shown(spec)}{hint}; `tfcalc presets` lists them, or pass a path to a YAML file")


def _close_names(key: str, choices: list[str]) -> list[str]:
    from tfcalc.config_rules import close_names

    return close_names(key, choices, n=3)  # 'gpt-2' -> gpt2; 'llama2' -> each Llama 2; 'gpt3-175' -> gpt3-175b


# free-text fields: `--set name=[bold]x[/bold]` names the model "[bold]x[/bold]" (not a YAML list, not an error)
TEXT_FIELDS = ("name", "source", "nominal_params")


def parse_override(text: str) -> tuple[str, Any]:
    """'key=value' -> (key, value parsed as a YAML scalar: 12 -> int, true -> bool, null -> None)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {shown(text)}")
    if key not in FIELD_NAMES:
        raise ConfigError(f"--set: unknown field {shown(key)}{suggest(key, FIELD_NAMES)}")
    if key in TEXT_FIELDS and raw.strip():  # a name or a source is the text typed, brackets and all
        return key, raw
    try:
        value = yaml_load.load(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        why = getattr(e, "problem", None) or "not a YAML value"
        raise ConfigError(f"--set {key}: cannot read the value {shown(raw)} ({why})") from None
    except Exception as e:  # noqa: BLE001 -- whatever the YAML library raises, a value it cannot read is bad input
        raise ConfigError(f"--set {key}: cannot read the value {shown(raw)} ({type(e).__name__})") from None
    if isinstance(value, dict) or (isinstance(value, list) and key not in LIST_FIELDS):
        raise ConfigError(f"--set {key}: expected a single value, got {shown(raw)}")
    return key, value


# what a depth pattern is written in (tfcalc.config_copies): a --set of any of these besides the depth is the
# user's own pattern, checked as written
_PATTERN_FIELDS = ("n_encoder_layer", "full_attention_every", "nope_every", "layer_pattern", "first_dense_layers",
                   "moe_every", "dense_layers", "moe_shortcut")


def _config_from(data: dict[str, Any], origin: str, overrides: list[str]) -> ModelConfig:
    data = {k: v for k, v in data.items() if k not in _META_KEYS}
    given = dict(parse_override(text) for text in overrides)
    if "stored_quant" in given and given["stored_quant"] is None:  # unquantized: the stored format goes too
        data = {k: v for k, v in data.items() if not k.startswith("stored_quant_")}
    try:
        return from_mapping({**data, **given})
    except ConfigError as e:
        shallower = _shallower(data, given)
        if shallower is not None:
            return shallower
        raise ConfigError(f"{origin}: {e}") from None
    except TypeError as e:  # a dataclass argument error not caught by the checks above
        raise ConfigError(f"{origin}: {e}") from None


def _shallower(data: dict[str, Any], given: dict[str, Any]) -> Optional[ModelConfig]:
    """``--set n_layer=N`` below a model's depth that its depth pattern's fields refuse as written (Llama 4's
    nope_every 4 at 2 layers, DeepSeek-V3's first_dense_layers 3 at 3): the copy made from the description
    (Architecture.shrunk: the depth pattern with fewer repeats, each kind of layer kept), its pattern fields
    written back (tfcalc.config_copies), as ``bench --n-layer`` makes it. None where the user wrote a pattern
    field too, or the model without the new depth is refused anyway: the refusal stands as written."""
    n = given.get("n_layer")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or any(f in given for f in _PATTERN_FIELDS):
        return None
    try:
        full = from_mapping({**data, **{k: v for k, v in given.items() if k != "n_layer"}})
    except (ConfigError, TypeError):
        return None
    if n >= full.n_layer:
        return None
    from tfcalc.config_copies import with_architecture  # the depth pattern's writer, only when needed

    return with_architecture(full, full.architecture.shrunk(n))


def apply_overrides(cfg: ModelConfig, overrides: list[str]) -> ModelConfig:
    """A config with --set overrides applied on top (each re-validated)."""
    import dataclasses

    data = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return _config_from(data, cfg.name, list(overrides))


def load_file(path: str | Path, overrides: list[str] = ()) -> ModelConfig:
    path = Path(path)
    if path.suffix.lower() == ".json":
        from tfcalc import hf_config  # only for a config.json: a preset's start-up never pays for the mappers

        data = hf_config.config_fields(hf_config.parse_json(reading.read_text(path, "JSON"), path), path)
        return _config_from(data, path.name, list(overrides))
    data = yaml_load.read_mapping(path)
    data.setdefault("name", path.stem)
    data.setdefault("source", str(path))
    return _config_from(data, path.name, list(overrides))


def load_preset(name: str, overrides: list[str] = ()) -> ModelConfig:
    name = resolve_preset_name(name)
    return _config_from(yaml_load.read_mapping(preset_dir() / f"{name}.yaml"), f"preset {name}", list(overrides))


@dataclass(frozen=True)
class Source:
    """What a model argument named: its config, and where its weights are when it names a checkpoint."""

    cfg: ModelConfig
    folder: Optional[Path] = None  # a model folder (config.json, maybe safetensors)
    weights: Optional[Path] = None  # the checkpoint: a .safetensors file or a folder holding them


def _local(spec: str) -> Path:
    """spec as a local path, ~ expanded where it can be (an unknown user's ~name stays as written)."""
    try:
        return Path(spec).expanduser()
    except RuntimeError:
        return Path(spec)


def _names_checkpoint(spec: str, path: Path) -> bool:
    """A model folder (a folder named like a config file is a mistake, refused by the reader as one), a
    .safetensors file, or a Hugging Face id that names no local path."""
    kind = reading.entry_kind(path)
    suffix = path.suffix.lower()
    return ((kind == "a directory" and suffix not in (".yaml", ".yml", ".json")) or suffix == ".safetensors"
            or (kind is None and hub_cache.is_repo_id(spec)))


def checkpoint_source(spec: str, overrides: list[str] = ()) -> Source:
    """A model folder, a .safetensors file (config.json beside it), a Hugging Face id in the local
    cache, or anything load() reads; for the first three, where the weights are (None when the folder
    holds no safetensors file)."""
    path = _local(spec)
    if not _names_checkpoint(spec, path):
        return Source(load(spec, overrides))
    kind = reading.entry_kind(path)
    if path.suffix.lower() == ".safetensors" or kind == "a directory":
        return _folder_source(path if kind == "a directory" else path.parent, path, spec, overrides)
    folder = hub_cache.snapshot(spec)
    return _folder_source(folder, folder, spec, overrides, name=spec.split("/")[1])


def _folder_source(folder: Path, weights: Path, spec: str, overrides: list[str], name: Optional[str] = None) -> Source:
    config = folder / "config.json"
    reading.checkpoint_entry(weights)  # a file or a folder, never a FIFO or a device
    if not config.is_file():
        raise ConfigError(f"{shown_path(spec)}: no config.json in {shown_path(folder)} "
                          "(tfcalc reads the shapes from it)")
    from tfcalc import hf_config  # only for a checkpoint's config.json (see load_file)

    data = hf_config.config_fields(hf_config.parse_json(reading.read_text(config, "JSON"), config), config)
    if name:
        data["name"] = name
    data["source"] = f"{spec} ({data['source']})"
    # weights: safetensors files or an index (a folder of pickled .bin files is refused when read)
    has_weights = weights.is_file() or any(weights.glob("*.safetensors")) or any(weights.glob("*.bin")) or (
        weights / "model.safetensors.index.json").exists()
    return Source(_config_from(data, config.name, list(overrides)), folder, weights if has_weights else None)


def load(spec: str, overrides: list[str] = ()) -> ModelConfig:
    """A preset name or alias; a path to a YAML file, a Hugging Face config.json, a model folder or a
    .safetensors file beside its config.json; or a Hugging Face id (org/name) in the local cache. Then
    the --set overrides on top."""
    path = _local(spec)
    if _names_checkpoint(spec, path):
        return checkpoint_source(spec, overrides).cfg
    return load_file(path, overrides) if is_path(spec) else load_preset(spec, overrides)
