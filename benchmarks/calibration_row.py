"""One published figure beside tfcalc's prediction of it (a row of benchmarks/calibration.py's tables), and
the GPT-J 6B shapes that both the calibration set and the held-out set (benchmarks/calibration_held_out.py)
run: a module of its own so that neither of the two imports the other's table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
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
# Llama 3 405B's shapes (Dubey et al. 2024, sec. 3.2, Table 3), on the llama3-70b preset
LLAMA3_405B = dict(n_layer=126, d_model=16384, n_head=128, n_kv_head=8, d_ff=53248, vocab_size=128256,
                   max_seq_len=8192)
# torchtitan's H100 benchmarks' hardware (benchmarks/devices/grand-teton-h100-500w.yaml)
GRAND_TETON = str(Path(__file__).parent / "devices" / "grand-teton-h100-500w.yaml")
