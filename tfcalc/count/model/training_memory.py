"""The state a training step keeps besides its activations -- weights, gradients, fp32 master weights,
optimizer moments -- and a training step's peak (the module docstring of tfcalc.count.model.memory derives each
term). Pure arithmetic, no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model import muon
from tfcalc.count.model.dtypes import BITS_PER_ELEMENT, weight_bytes
from tfcalc.count.model.memory import FP32, OPTIMIZERS, TRAINING_DTYPES, activations, check_dtype
from tfcalc.count.model.params import param_entries, total as param_total
from tfcalc.errors import InputError as ConfigError
from tfcalc.workload import Workload


@dataclass(frozen=True)
class TrainingState:
    """Bytes of the state a training step keeps for its whole length (activations apart)."""

    optimizer: str
    weights: int
    gradients: int
    master_weights: int
    optimizer_state: int
    params: int
    step_temporaries: int  # alive during the optimizer step only (see the module docstring)

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.master_weights + self.optimizer_state

    @property
    def bytes_per_param(self) -> float:
        return self.total / self.params


def check_training_dtype(dtype: str) -> None:
    check_dtype(dtype)
    if dtype not in TRAINING_DTYPES:
        raise ConfigError(
            f"training is modelled for {', '.join(TRAINING_DTYPES)} weights; {dtype} is an inference format here"
        )


def training_state(cfg: ModelConfig, dtype: str, optimizer: str = "adam-mixed") -> TrainingState:
    """Weights, gradients, master weights and optimizer state (see the module docstring)."""
    check_training_dtype(dtype)
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer '{optimizer}'; choose one of {', '.join(OPTIMIZERS)}")
    n = param_total(cfg)
    w = weight_bytes(n, dtype)
    largest = max(e.per_copy for e in param_entries(cfg) if not e.tied_to)
    if optimizer == "adam-mixed":
        narrow = BITS_PER_ELEMENT[dtype] < 32
        master = FP32 * n if narrow else 0
        return TrainingState(optimizer, w, w, master, 2 * FP32 * n, n, FP32 * largest * (3 if narrow else 2))
    if optimizer == "muon":
        return _muon_state(cfg, dtype, n, w)
    if optimizer == "adam":
        return TrainingState(optimizer, w, w, 0, 2 * w, n, 2 * weight_bytes(largest, dtype))
    return TrainingState(optimizer, w, w, 0, 0, n, 0)


def _muon_state(cfg: ModelConfig, dtype: str, n: int, w: int) -> TrainingState:
    """Muon on the hidden matrices, AdamW on the rest, on fp32 masters below fp32 (tfcalc.count.model.muon).
    The step's temporaries, torch.optim.Muon's single-tensor loop on the largest m × n matrix: the fp32 copy of
    its gradient (below fp32), the Nesterov update grad.lerp(buf) (fp32), Newton-Schulz's bf16 X and the next X
    (2·2mn) and its m × m Gram matrices A and B (2·2m²); or AdamW's on the largest other tensor, the larger."""
    narrow = BITS_PER_ELEMENT[dtype] < 32
    m = muon.matrix_params(cfg)
    rows, cols = muon.largest_matrix(cfg)
    ns = FP32 * rows * cols * (2 if narrow else 1) + 4 * rows * cols + 4 * rows * rows
    other = max((p.weight.numel // max(p.weight.copies, 1) for p in cfg.architecture.weights()
                 if not p.weight.tied_to and not muon.hidden_matrix(tuple(p.weight.shape), p.where == "block")),
                default=0)
    adam = FP32 * other * (3 if narrow else 2)
    return TrainingState("muon", w, w, FP32 * n if narrow else 0, muon.state_bytes(n, m), n, max(ns, adam))


def training_bytes(cfg: ModelConfig, workload: Workload, optimizer: str = "adam-mixed",
                   attention: Optional[str] = None, recompute: str = "none") -> int:
    """The peak of a training step of the workload: the state, plus the activation peak (backward) or
    the optimizer step's temporaries, whichever is larger. attention None: the module's own kernel."""
    w = workload.for_model(cfg)
    state = training_state(cfg, w.dtype, optimizer)
    acts = activations(cfg, w, attention, recompute)
    return state.total + max(acts.total, state.step_temporaries)
