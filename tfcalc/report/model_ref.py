"""Which model a report is about, as the user named it: the config, and the --set overrides on top.

Reports carry a ModelRef rather than a bare config so that every title says what was counted
(``gpt2 + n_layer=6, tie_embeddings=false``), and a preset's named size and source are not claimed for
a model the overrides changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from tfcalc.config import ModelConfig
from tfcalc.presets import checkpoint_source, parse_override

if TYPE_CHECKING:
    from tfcalc.workload import Workload

ModelSpec = Union[str, Path, ModelConfig]


@dataclass(frozen=True)
class ModelRef:
    cfg: ModelConfig
    overrides: tuple[str, ...] = ()
    weights: Optional[Path] = None  # a checkpoint the model argument named (a folder, a .safetensors file)

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def label(self) -> str:
        """'gpt2', or 'gpt2 + n_layer=6, tie_embeddings=false'."""
        if not self.overrides:
            return self.cfg.name
        return f"{self.cfg.name} + {', '.join(self.overrides)}"

    @property
    def as_published(self) -> bool:
        """True when no override changed the model its source describes."""
        return not self.overrides


class WorkloadFields:
    """The accessors every report about one model at one workload shares; the report's dataclass holds
    ``model`` (a ModelRef) and ``workload`` (a resolved tfcalc.workload.Workload)."""

    model: ModelRef
    workload: "Workload"

    @property
    def cfg(self) -> ModelConfig:
        return self.model.cfg

    @property
    def batch(self) -> int:
        return self.workload.batch

    @property
    def seq(self) -> int:
        return self.workload.seq

    @property
    def src_seq(self) -> Optional[int]:
        """Source tokens per sequence of an encoder-decoder; None for the other kinds."""
        return self.workload.src_seq

    @property
    def dtype(self) -> str:
        return self.workload.dtype


def _canonical(text: str) -> str:
    key, value = parse_override(text)
    shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return f"{key}={shown}"


def resolve(model: ModelSpec, overrides: list[str] | tuple[str, ...] = ()) -> ModelRef:
    """A preset name or alias, a path, or a ModelConfig; then the --set overrides."""
    overrides = tuple(overrides or ())
    if isinstance(model, ModelConfig):
        if overrides:
            from tfcalc.presets import apply_overrides

            return ModelRef(apply_overrides(model, list(overrides)), tuple(_canonical(o) for o in overrides))
        return ModelRef(model)
    source = checkpoint_source(str(model), list(overrides))
    if source.weights is not None and source.cfg.n_expert is not None:  # quantized experts as the config says
        from tfcalc.checkpoint.count import model_type
        from tfcalc.checkpoint.files import read_headers
        from tfcalc.checkpoint.quant import check_expert_format

        headers = read_headers(source.weights)
        check_expert_format(source.cfg, headers, model_type(headers.folder))
    return ModelRef(source.cfg, tuple(_canonical(o) for o in overrides), source.weights)
