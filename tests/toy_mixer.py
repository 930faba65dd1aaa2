"""The boilerplate of the toy linear-attention mixer two tests define (tests/test_mixer_protocol.py, counted
by the folds; tests/model/test_mixer_plugin.py, built and run by tfcalc.model): the parts of the mixer
protocol (tfcalc.architecture.mixer) in which the two agree -- Q, K, V and O bias-free projections of H·h
channels, the feature map elu(x) + 1 on Q and K (2 FLOPs an element, as the mixer declares), no window or
chunk, a fixed state that neither rewinds nor rings over context-parallel ranks, TP by heads. Each test's
subclass adds what differs: its position-mixing matmuls, kernel, saved activations, working set and state
(Katharopoulos et al. 2020, "Transformers are RNNs", sec. 3.2 and 3.4).
"""

from __future__ import annotations

from dataclasses import dataclass

from tfcalc.architecture.mixer import Capabilities, EagerOp, Elementwise, StateTensor
from tfcalc.architecture.tensors import Linear, Weight


@dataclass(frozen=True)
class LinearAttentionBase:
    d_model: int
    n_head: int
    head_dim: int
    causal: bool = True

    @property
    def width(self) -> int:
        return self.n_head * self.head_dim

    def weights(self) -> list[Weight]:
        d, w = self.d_model, self.width
        out = [Weight(f"{p}_weight", (w, d), "attention", f"linear attention {p.upper()}", "rows") for p in "qkv"]
        return out + [Weight("o_weight", (d, w), "attention", "linear attention O", "cols")]

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        d, w = self.d_model, self.width
        out = [Linear(p, "attention_proj", f"{p.upper()} projection", d, w) for p in "qkv"]
        return out + [Linear("o", "attention_proj", "O projection", w, d)]

    def elementwise(self, queries: int, keys: int) -> list[Elementwise]:
        return [Elementwise("feature_map", "elu + 1 on Q and K", queries * 2 * self.width, per_element=2)]

    def mask_span(self, length: int) -> tuple[None, None]:
        return None, None

    def eager_ops(self, tokens: int) -> list[EagerOp]:
        w = self.width  # elu + 1 on Q and K: read and write each element (2), back 3 (grad, input, out)
        return [EagerOp("moves", "qkv", 2 * tokens * 2 * w, 3 * tokens * 2 * w, 2, 2)]

    def state(self) -> list[StateTensor]:
        raise NotImplementedError  # each toy says its own

    def expanded_state(self) -> list[StateTensor]:
        return self.state()

    def tp_widths(self) -> list[tuple[str, int]]:
        return [("n_head", self.n_head)]

    def tp_state_heads(self) -> int:
        return self.n_head

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(rewind=False, context_parallel=False)
