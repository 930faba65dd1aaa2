"""The generation state of one self-attention layer (softmax or latent), allocated once at a fixed shape.

What it holds is what the layer's component says it keeps per cached position (``state_tensors()`` of
tfcalc.architecture's ``Attention``: K and V; of ``LatentAttention``: the KV latent and the rotary key),
each (B, heads, slots, width) in the cache's dtype, with ``slots`` = ``kv_positions(max_tokens)``: every
position in a layer that sees the whole context, a ring of W slots for a sliding window of W, of C slots
for chunks of C (Llama 4). Its bytes are therefore the bytes tfcalc.count.model.memory.kv_cache_bytes counts:
one description, tested (tests/model/test_state_static.py).

Why W slots and not the W - 1 past positions a step reads beside its own: a decode step writes its K and
V into the ring first (position p in slot p mod W, over p - W, which no query from p on may see) and then
reads the whole ring, a fixed span whose W keys are exactly those the query sees (its own and the W - 1
before it; Jiang et al. 2023, sec. 2, "rolling buffer cache"; transformers' StaticSlidingWindowLayer
allocates the same W, cache_utils.py). Keeping W - 1 would need a concatenation of the ring and the new
key every step: a copy of the whole ring per layer and token, read twice, to save one slot. A chunk's ring
the same: position p in slot p mod C; the slots after p mod C still hold the previous chunk, hidden by
the mask.

A ring that rewinds (speculative decoding's verify, issue 29): a verify step writes T = k + 1 positions
before it reads, so with W slots its first query would find the keys it needs overwritten by the step's
later positions. The ring is given ``spare`` slots more, S = W + spare (``new_state(..., spare=k)``): a step
of T <= spare + 1 tokens at positions p .. p + T - 1 overwrites positions up to p + T - 1 - S <= p - W,
which no query from p on sees (a chunk the same, its start being at most C - 1 before p). The rejected
positions are then forgotten as in a full layer (their slots hidden, ``StaticCache.rewind``), and what they
overwrote is never needed again: after positions up to h - 1 were written the ring holds h - S .. h - 1,
and a query at m >= h - spare - 1 needs keys from m - W + 1 >= h - S on (``rewind_floor``). This is vLLM's
lookahead: a sequence's blocks are allocated for the proposals a verify writes beside the tokens kept
(``num_lookahead_slots``), so nothing the window still needs is freed before the verify is decided.
transformers' StaticSlidingWindowLayer does not: once full it takes several tokens by a concatenation
(W - 1 + T keys, another shape) and can no longer ``crop`` (``is_croppable`` only while the whole
generation fits the window, cache_utils.py). A plain decode (spare 0) keeps W slots, as above.

Which position each slot holds is a device tensor the cache keeps per layout (tfcalc.model.cache); the
mask a step attends under is built from it on the device, so the slot order never matters (keys are
stored after RoPE) and nothing is read back to the host.
"""

from __future__ import annotations

import functools

import torch


class AttentionState:
    """One layer's state tensors, (B, heads, slots, width) each, and how its slots are laid out."""

    def __init__(self, spec, batch: int, max_tokens: int, device, dtype: torch.dtype, spare: int = 0,
                 packed: bool = False, stacked: bool = False):
        """``spec``: the layer's attention component (tfcalc.architecture Attention or LatentAttention);
        ``spare``: slots a window's or chunk's ring keeps beyond its span (the module docstring).
        ``packed``: its tensors (of one head count) side by side in ONE buffer (B, heads, slots, Σ widths), each
        a view of its channels: latent attention's rows [c | k_r], which the absorbed step reads as its keys
        without a copy (tfcalc.model.latent_absorbed.cache_keys); the same bytes as the tensors apart.
        ``stacked``: its tensors (of one width, K and V) one after the other along the heads of ONE buffer
        (B, Σ heads, slots, width), each a view of its heads, so that a step's new K and V, adjacent in the
        projection's output, are written by one indexed write (``write`` given them joined; layers.Attention):
        one kernel a layer fewer in a decode step (3.7 us on an H100, benchmarks/decode_profile.py)."""
        window, chunk = getattr(spec, "window", None), getattr(spec, "chunk", None)
        self.window, self.chunk = window, chunk
        self.size = spec.kv_positions(max_tokens, spare)
        span = chunk if chunk is not None else window
        # a ring that wraps within max_tokens; a layer that sees every position, or a ring as long as the
        # whole generation, never overwrites a slot
        self.wraps = span is not None and self.size < max_tokens
        self.spare = self.size - span if self.wraps else None
        # the layout: layers of one layout share their slot positions and their step's mask
        self.layout = ("chunk", chunk, self.size) if chunk is not None else (
            ("window", window, self.size) if window is not None else ("full", None, self.size))
        self.names = tuple(name for name, _, _ in spec.state_tensors())
        shapes = spec.state_tensors()
        self.packed = None  # the one buffer the tensors are views of, when packed
        self.stacked = None  # the one buffer (B, Σ heads, S, w) the tensors are head views of, when stacked
        widths = {w for _, _, w in shapes}
        if stacked and len(shapes) > 1 and len(widths) == 1:  # else apart (a K/V reader keeps no tensor)
            heads = [h for _, h, _ in shapes]
            self.stacked = torch.zeros(batch, sum(heads), self.size, widths.pop(), device=device, dtype=dtype)
            self.tensors = list(self.stacked.split(heads, dim=1))  # views (B, h, S, w)
        elif packed:
            heads = {h for _, h, _ in shapes}
            if len(heads) != 1:
                raise ValueError(f"a packed state needs one head count for its tensors, not {sorted(heads)}")
            widths = [w for _, _, w in shapes]
            self.packed = torch.zeros(batch, heads.pop(), self.size, sum(widths), device=device, dtype=dtype)
            self.tensors = list(self.packed.split(widths, dim=-1))  # views (B, nh, S, w), rows of Σ widths
        else:
            self.tensors = [torch.zeros(batch, heads, self.size, width, device=device, dtype=dtype)  # (B, nh, S, w)
                            for _, heads, width in shapes]
        self.row_index = torch.arange(batch, device=device)[:, None]  # (B, 1): write()'s rows, made once

    carried = ()  # nothing a step rewrites whole: it writes its positions' slots only (tfcalc.model.cache)

    @property
    def ring(self) -> bool:
        """Slots overwritten by later positions (a window or chunk)."""
        return self.layout[0] != "full"

    rewindable = True  # moving the positions back forgets the last ones, as far back as rewind_floor

    @property
    def widest_step(self) -> int | None:
        """The most tokens a step may write before it reads (None: any): spare + 1 for a ring that wraps."""
        return None if not self.wraps else self.spare + 1

    def rewind_floor(self, high: int) -> int:
        """The shortest length it can go back to after positions 0 .. high - 1 were written: high - spare - 1
        for a ring that wraps (the module docstring), 0 otherwise."""
        return 0 if not self.wraps else high - self.spare - 1

    def prefill(self, slots: dict) -> functools.partial:
        """The store a prompt's layer calls: its last positions written into this layout's ``slots``."""
        mine = slots[self.layout]  # (B, keep): the positions the ring keeps
        return functools.partial(self.prefill_store, mine, mine.shape[1])

    def step(self, slots: dict, span: int) -> functools.partial:
        """The store a step's layer calls: the new positions written, the first min(span, slots) read."""
        return functools.partial(self.step_store, slots[self.layout], min(span, self.size))

    @property
    def nbytes(self) -> int:
        whole = self.packed if self.packed is not None else self.stacked
        if whole is not None:
            return whole.numel() * whole.element_size()
        return sum(t.numel() * t.element_size() for t in self.tensors)

    def _apart(self, new: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """The new positions as one tensor each: a joined (B, Σ heads, T, w) split into its head views."""
        if len(new) == 1 and len(self.tensors) > 1:
            return tuple(new[0].split([t.shape[1] for t in self.tensors], dim=1))
        return new

    def write(self, slots: torch.Tensor, *new: torch.Tensor) -> None:
        """Each row's new positions (B, heads, T, width) into the slots (B, T) given, in place: one indexed
        write per tensor at device indices (rows, slots), so the same kernel whichever slots. (A scatter_
        with its index expanded to every element took 3.6 us a tensor in a 7B decode step on an H100.) Packed:
        the T new rows joined (a copy of the new positions only, never of the cache) and written once.
        Stacked and given the new K and V joined, (B, Σ heads, T, w) (a view of the projection's output): one
        write, no copy; given them apart, one write each."""
        if self.stacked is not None and len(new) == 1:
            buffers = [self.stacked]
        elif self.packed is not None:
            buffers, new = [self.packed], (torch.cat([x.to(self.packed.dtype) for x in new], dim=-1),)
        else:
            buffers, new = self.tensors, self._apart(new)
        rows = self.row_index[:slots.shape[0]]  # (B, 1), broadcast against slots (B, T)
        for buffer, x in zip(buffers, new, strict=True):
            buffer.transpose(1, 2).index_put_((rows, slots), x.transpose(1, 2).to(buffer.dtype))  # (B, S, nh, w)

    def read(self, n: int) -> list[torch.Tensor]:
        """The first n slots of each tensor: views, (B, heads, n, width)."""
        return [t[:, :, :n] for t in self.tensors]

    def prefill_store(self, slots: torch.Tensor, keep: int, *new: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """A prompt attends to itself: its last ``keep`` positions are written into ``slots`` (B, keep), and
        its own tensors come back."""
        if keep:
            self.write(slots, *(x[:, :, x.shape[2] - keep:] for x in new))
        return self._apart(new)

    def step_store(self, slots: torch.Tensor, span: int, *new: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """A step (decode, verify, rows at their own positions): write the new positions, then hand back the
        first ``span`` slots to attend to under the step's mask."""
        self.write(slots, *new)
        return tuple(self.read(span))

    def rows(self, rows: slice) -> AttentionState:
        """A view of some rows (their buffers shared): a prefill into one row, a step over the rows in flight."""
        view = object.__new__(AttentionState)
        view.__dict__.update(self.__dict__)
        view.tensors = [t[rows] for t in self.tensors]
        view.packed = None if self.packed is None else self.packed[rows]
        view.stacked = None if self.stacked is None else self.stacked[rows]
        return view
