"""The fixed-size decode state of a layer without positions (a convolution's last K inputs and/or a recurrent
state): the short convolution's, Mamba2's and gated DeltaNet's (tfcalc.model.short_conv, tfcalc.model.mamba2,
tfcalc.model.gated_deltanet). It follows the state protocol of tfcalc.model.cache: its tensors are allocated
once, it has no positions (``layout`` None) and cannot rewind, and a step rewrites every tensor whole
(``carried``: put back around a CUDA graph's capture, tfcalc.model.generate).

``prefill`` and ``step`` return a view over the same buffers whose ``decoding`` says which of the two the
module's forward runs: a prompt (from zero, whatever a row held before) or a step that continues from the
state. The convolution's inputs, where a layer keeps them, are its first tensor, (B, C, K).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class FixedState:
    """Tensors named by ``names`` (a subclass's), (B, ...) each, zeros at first; ``decoding`` False."""

    layout = None
    rewindable = False
    names: tuple[str, ...] = ()

    def __init__(self, batch: int, device, *shapes: tuple[torch.Size, torch.dtype]):
        """One (shape without the batch, dtype) per name, in order."""
        for name, (shape, dtype) in zip(self.names, shapes, strict=True):
            setattr(self, name, torch.zeros(batch, *shape, device=device, dtype=dtype))
        self.decoding = False

    @property
    def tensors(self) -> list[torch.Tensor]:
        return [getattr(self, name) for name in self.names]

    @property
    def carried(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.tensors)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)

    def _view(self, tensors: list[torch.Tensor], decoding: bool) -> FixedState:
        view = object.__new__(type(self))
        for name, t in zip(self.names, tensors, strict=True):
            setattr(view, name, t)
        view.decoding = decoding
        return view

    def prefill(self, slots: dict) -> FixedState:
        return self._view(self.tensors, False)

    def step(self, slots: dict, span: int) -> FixedState:
        return self._view(self.tensors, True)

    def rows(self, rows: slice) -> FixedState:
        """Some sequences (B' rows), the buffers shared (written through): tfcalc.model.slots."""
        return self._view([t[rows] for t in self.tensors], self.decoding)

    def keep(self, u: torch.Tensor) -> None:
        """A prompt's convolution inputs u (B, C, T): the last K kept, zeros before position 0 (as transformers
        pads)."""
        conv = self.tensors[0]
        k = conv.shape[-1]
        conv.copy_(F.pad(u, (k, 0))[..., -k:])

    def shift(self, u: torch.Tensor) -> torch.Tensor:
        """A step's inputs u (B, C, T) -> the K - 1 + T columns its T outputs read (in the state's dtype); the
        last K kept."""
        conv = self.tensors[0]
        window = torch.cat([conv[..., 1:], u.to(conv.dtype)], dim=-1)  # (B, C, K - 1 + T)
        conv.copy_(window[..., -conv.shape[-1]:])
        return window
