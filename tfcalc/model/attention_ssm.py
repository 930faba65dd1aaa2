"""The torch side's one forwarding of the mixer protocol for a mixer that holds an attention and a Mamba2 mixer in
one slot (tfcalc.model.mixers): Falcon-H1's attention beside Mamba2 (tfcalc.model.parallel_hybrid) and Zamba2's
shared block before its Mamba2 (tfcalc.model.zamba2). Its generation state is one layer's state made of the two
parts' (``PairedState``: the attention's K and V, positions and layout, beside the Mamba2 part's fixed conv ring and
SSM state), allocated by each part's own module and driven through the state protocol of tfcalc.model.cache;
``AttentionSsmMixer`` allocates it, tells both parts their layer, and splits the store a forward is given between
the parts. What each family runs between the parts stays in its own module."""

from __future__ import annotations

import torch

from tfcalc.model.mixers import MixerModule


class PairedState:
    """The attention's state and the Mamba2 part's, one layer's: the attention's layout and slots (the cache's
    positions and the step's mask are its), both parts' tensors (K and V first), the Mamba2 part's carried;
    no rewind (the recurrent part cannot)."""

    rewindable = False

    def __init__(self, attn, ssm):
        self.attn, self.ssm = attn, ssm
        self.layout = attn.layout
        self.size, self.window, self.chunk = attn.size, attn.window, attn.chunk

    @property
    def tensors(self) -> list[torch.Tensor]:
        return list(self.attn.tensors) + list(self.ssm.tensors)

    @property
    def carried(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.attn.carried) + tuple(self.ssm.carried)

    @property
    def nbytes(self) -> int:
        return self.attn.nbytes + self.ssm.nbytes

    def prefill(self, slots: dict) -> tuple:
        return self.attn.prefill(slots), self.ssm.prefill(slots)

    def step(self, slots: dict, span: int) -> tuple:
        return self.attn.step(slots, span), self.ssm.step(slots, span)

    def rows(self, rows: slice) -> PairedState:
        return PairedState(self.attn.rows(rows), self.ssm.rows(rows))


class AttentionSsmMixer(MixerModule):
    """A mixer module with an attention (whose state ``attention_state`` allocates) and a Mamba2 mixer ``self.ssm``:
    the protocol's state and layer calls forwarded to both parts. The store a forward gets is the pair that
    ``PairedState.prefill`` / ``step`` return, or None outside generation: ``split_store`` gives each part its own."""

    ssm: torch.nn.Module

    def attention_state(self, batch: int, max_tokens: int, device, dtype):
        """The attention part's state (its K and V), as its own ``new_state`` allocates it."""
        raise NotImplementedError(f"{type(self).__name__} names no attention state")

    def new_state(self, batch: int, max_tokens: int, device, dtype, spare: int = 0) -> PairedState:
        # ``spare`` is asked only of a mixer whose component declares rewind: neither of these does (the
        # recurrent part cannot), so both parts are allocated without spare slots
        return PairedState(self.attention_state(batch, max_tokens, device, dtype),
                           self.ssm.new_state(batch, max_tokens, device, dtype))

    def at_layer(self, index: int, count: int) -> None:
        self.ssm.at_layer(index, count)

    @staticmethod
    def split_store(store) -> tuple:
        """(the attention's store, the Mamba2 part's), (None, None) outside generation."""
        return (None, None) if store is None else store
