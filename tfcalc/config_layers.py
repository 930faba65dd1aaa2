"""Per-layer views of a ModelConfig -- each layer's window, the positions its KV cache keeps, the masks a
sequence needs -- read from its description (``cfg.architecture``, tfcalc.architecture) or its layer
kinds (tfcalc.architecture.patterns). A mixin of tfcalc.config.ModelConfig, kept apart so the dataclass
stays readable. Pure Python: no torch, typer or rich here."""

from __future__ import annotations

from typing import Optional

from tfcalc.architecture.mixer import is_local, state_positions
from tfcalc.architecture.patterns import layer_kind


class PerLayerViews:
    """Methods of ModelConfig (self is the config) that look at its layers one by one."""

    def kv_positions(self, context: int, layer: int = 0) -> int:
        """Positions the KV cache of self-attention layer ``layer`` keeps at a context of this many tokens
        (the positions its mixer's growing state keeps: all of them, or what its window or chunk needs; see
        docs/serving.md)."""
        return state_positions(self.architecture.output.layer(layer).mixer, context)

    def cached_positions(self, context: int) -> int:
        """Positions the KV caches of all the decoder's self-attention layers keep together: the sum of
        kv_positions over the layers (folded over the layer kinds)."""
        stack = self.architecture.decoder
        return 0 if stack is None else sum(n * state_positions(b.mixer, context) for b, n in stack.kinds())

    def layer_window(self, layer: int, length: Optional[int] = None) -> Optional[int]:
        """The sliding window of causal self-attention layer ``layer`` (0-based), None where it sees the
        whole context (a global layer, tfcalc.architecture.patterns; a chunked one has no window) and,
        given a sequence length, where the window hides nothing at it (W >= length): one rule for the
        masks the model builds and the ones the working set counts."""
        if self.sliding_window is None or not layer_kind(self, layer).local:
            return None
        return None if length is not None and self.sliding_window >= length else self.sliding_window

    def attention_spans(self, length: int) -> set[tuple[Optional[int], Optional[int]]]:
        """The distinct (window, chunk) of the causal self-attention layers at a sequence of ``length``
        tokens, (None, None) for a layer that sees its whole causal context (no window or chunk, or one of
        ``length`` or more): each other entry is a mask the model builds (tfcalc.model.Stack.layer_masks)."""
        stack = self.architecture.decoder
        if stack is None:
            return set()
        out = set()
        for block, _ in stack.kinds():  # the mixer's mask (tfcalc.architecture.mixer): (None, None) for none
            out.add(block.mixer.mask_span(length))
        return out

    @property
    def windowed_layers(self) -> int:
        """Causal self-attention layers that attend through a sliding window or a chunk (local layers),
        folded over the layer kinds."""
        stack = self.architecture.decoder
        if stack is None:
            return 0
        return sum(n for b, n in stack.kinds() if is_local(b.mixer))
