"""The flat fields of Gemma 4's and Gemma 3n's layers beyond Gemma 3's: a mixin of tfcalc.config.ModelConfig (its
fields inherited, keyword-only, each with a default), kept apart so the dataclass stays readable. What each builds
is in the description (tfcalc.architecture: block, model); their rules are checked where they are built. Pure
Python: no torch, typer or rich here.

- ``layer_scalar`` (Gemma 4, modeling_gemma4.py Gemma4TextDecoderLayer.layer_scalar): each block's output, residual
  included, times a scalar of its own, held as a buffer (no parameter; 1 until a checkpoint is loaded);
- ``rope_proportion`` (Gemma 4's global layers, with ``rope_scaling: proportional``; tfcalc.config_rope checks it,
  tfcalc.architecture.rope builds it): the share of a whole head's rotate-half frequencies that turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True, kw_only=True)
class GemmaFields:
    layer_scalar: bool = False
    rope_proportion: Optional[float] = None
