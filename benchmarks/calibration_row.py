"""One published figure beside tfcalc's prediction of it (a row of benchmarks/calibration.py's tables), and
the GPT-J 6B shapes that both the calibration set and the held-out set (benchmarks/calibration_held_out.py)
run: a module of its own so that neither of the two imports the other's table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Row:
    group: str
    label: str
    source: str
    published: float
    unit: str
    predict: Callable[[], float]
    held_out: bool = False


GPTJ = dict(n_layer=28, d_model=4096, n_head=16, d_head=256, d_ff=16384, vocab_size=50400, max_seq_len=2048,
            pos_encoding="rope", rope_fraction=0.25, tie_embeddings=False, lm_head_bias=True)  # HF GPTJConfig
