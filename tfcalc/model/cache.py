"""The static, preallocated generation state of a whole model, and what a step needs of it (the gpt-fast
design, with fixed shapes): every self-attention layer's state (tfcalc.model.attention_state:
K and V, or a latent and its rotary key; a window's or chunk's ring) is allocated once for the whole
generation and written in place; nothing grows or is re-allocated per token, and a step's shapes do not
change from one token to the next.

Positions live on the device. ``next_pos`` (B,) holds each sequence's next position; per layout (full, a
window of W, a chunk of C: layers of one layout share it) ``slot_pos`` (B, slots) holds the position each
slot holds, -1 where empty. A step of T tokens per sequence:

1. its query positions q = next_pos[:, None] + 0..T-1 (B, T), and per layout the slots they go to (q mod
   slots), written into slot_pos (a scatter);
2. each layer writes its new K and V (or latent and rotary key) into those slots, in place;
3. each layer attends over the first ``span`` slots of its state, span = min(bucket, slots), under a mask
   built on the device from q and slot_pos (tfcalc.model.step_masks): a key is seen when it is written
   (slot_pos >= 0), not after the query, within the window or in the query's chunk; ALiBi adds its
   distance bias from the same positions;
4. next_pos += T, on the device.

The bucket is the live length rounded up to a power of two (at least 16, at most max_tokens: litgpt's
``input_pos_maxp1``), chosen on the host from the host-known count of positions written (``length``,
kept beside next_pos and never read back from it): a short context reads 16, 32, ... slots, not the whole
cache, and the steps within one bucket have the same shapes, so one CUDA graph per bucket replays them
(tfcalc.model.generate). Nothing in a step reads a value back to the host.

The state protocol: each layer's state is whatever its torch mixer module's ``new_state`` allocates
(tfcalc.model.mixers); the cache and the step ask it, never its class:

- ``layout``: the key of the slot positions it reads (layers of one layout share them and their step's
  mask), or None for a state without positions (a recurrent state: no slots, no mask);
- ``prefill(slots)`` and ``step(slots, span)``: the ``store`` its module's forward calls in a prompt and in
  a step, given the slots (B, T) of each layout and the step's span;
- ``tensors`` and ``nbytes``: what it allocates (``rows(rows)``: a view of some sequences, buffers shared);
- ``rewindable``: whether moving the positions back forgets the last positions (a recurrent state cannot);
  optionally ``widest_step`` (the most tokens a step may write before it reads, None: any) and
  ``rewind_floor(high)`` (the shortest length it can return to once ``high`` positions were written): a
  window's or chunk's ring with ``spare`` slots (tfcalc.model.attention_state);
- ``carried``: the tensors a step rewrites whole (a recurrent state), saved and put back around a CUDA
  graph's warm-up and capture as the positions are (tfcalc.model.generate); () for K and V.

Use: ``Transformer.new_cache(batch, max_tokens)``, then ``prefill`` (the prompt, from position 0) and
``decode`` (one token per sequence per call), or ``extend`` (several: a speculative verify step, its width
at most spare + 1 where a layer keeps a ring, ``new_cache(..., spare=k)``), and ``rewind`` to forget
rejected positions.
"""

from __future__ import annotations

import torch

from tfcalc.config import ModelConfig
from tfcalc.count.serving.roofline import MIN_BUCKET, read_span  # noqa: F401 (MIN_BUCKET re-exported)
from tfcalc.errors import InputError
from tfcalc.model.attention_state import AttentionState


def check_decodable(cfg: ModelConfig, max_tokens: int) -> None:
    """InputError unless cfg can generate and its positions reach max_tokens (prompt and new tokens)."""
    if cfg.arch == "encoder" or not cfg.lm_head:
        raise InputError(f"{cfg.name} has no causal stack and LM head to decode with")
    if cfg.pos_encoding in ("learned", "rope", "sinusoidal") and max_tokens > cfg.max_seq_len:
        raise InputError(f"{cfg.name} has {cfg.pos_encoding} positions for at most {cfg.max_seq_len} tokens; "
                         f"prompt and generated tokens need {max_tokens}")
    # what a decode step does not build (tfcalc infer still predicts these models on the roofline)
    if cfg.pos_encoding == "relative":
        raise InputError(f"{cfg.name}: decoding with T5's relative position bias is not built; "
                         "tfcalc infer predicts it without running it")
    if cfg.cross_attention and cfg.arch == "decoder":
        raise InputError(f"{cfg.name}: its blocks attend to an encoder's states, which a decode run does not make")


def bucket(live: int, max_tokens: int) -> int:
    """The span a step with ``live`` positions written (its own included) reads: the next power of two,
    at least MIN_BUCKET, at most max_tokens: the span the roofline prices (one definition, in the count)."""
    return read_span(live, max_tokens)


class StaticCache:
    """Every self-attention layer's state, the positions on the device, and an encoder-decoder's
    cross-attention K and V."""

    def __init__(self, states: list[AttentionState], batch: int, max_tokens: int, device):
        """``states``: each decoder layer's mixer state, first to last (its module's ``new_state``: the state
        protocol in the module docstring)."""
        self.batch, self.max_tokens, self.states = batch, max_tokens, states
        self.layouts = [s.layout for s in states]
        self.slot_pos = {key: torch.full((batch, key[2]), -1, dtype=torch.long, device=device)  # (B, S)
                         for key in dict.fromkeys(self.layouts) if key is not None}
        self.next_pos = torch.zeros(batch, dtype=torch.long, device=device)  # (B,)
        self.cross: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer (B, nkv, S_src, hs) each
        self.length = 0  # positions written (host-known, never read back): the next token's position
        self.high = 0  # the most positions ever written since the prefill (a ring's rewind floor), at a rewind
        self.active: torch.Tensor | None = None  # (B,) 1 in flight, 0 free: continuous batching's (model.slots)

    @property
    def k(self) -> list[torch.Tensor]:
        """Each layer's first state tensor (K, or a latent), (B, heads, slots, width)."""
        return [s.tensors[0] for s in self.states]

    @property
    def v(self) -> list[torch.Tensor]:
        """Each layer's second state tensor (V, or a rotary key)."""
        return [s.tensors[1] for s in self.states]

    @property
    def slots(self) -> list[int]:
        return [s.size for s in self.states]

    @property
    def windows(self) -> list[int | None]:
        return [s.window for s in self.states]

    @property
    def chunks(self) -> list[int | None]:
        return [s.chunk for s in self.states]

    @property
    def nbytes(self) -> int:
        """Bytes of the self-attention state (and the cross-attention K and V once computed): what
        tfcalc.count.model.memory.kv_cache_bytes counts. The position index (B × slots int64 per layout, and
        next_pos) is bookkeeping, not counted."""
        cross = sum(t.numel() * t.element_size() for kv in (self.cross or []) for t in kv)
        return sum(s.nbytes for s in self.states) + cross

    def reset(self) -> None:
        """Forget every position (the buffers are kept and overwritten)."""
        self.length, self.high, self.cross = 0, 0, None
        self.next_pos.zero_()
        for t in self.slot_pos.values():
            t.fill_(-1)

    def check_room(self, new_tokens: int) -> None:
        if self.length + new_tokens > self.max_tokens:
            raise InputError(f"the cache was set up for {self.max_tokens} tokens; "
                             f"{self.length} are written and {new_tokens} more asked for")

    def bucket(self, new_tokens: int) -> int:
        """The span a step of new_tokens reads after the positions written (see ``bucket``)."""
        return bucket(self.length + new_tokens, self.max_tokens)

    def place(self, positions: torch.Tensor, keep: int | None = None) -> dict[tuple, torch.Tensor]:
        """Per layout, the slots (B, T) the positions (B, T) go to, recorded in slot_pos; with ``keep`` (a
        prompt), per layout only the last min(keep, slots) positions, the ones a ring keeps."""
        out = {}
        for key, held in self.slot_pos.items():
            size = key[2]
            p = positions if keep is None else positions[:, positions.shape[1] - min(keep, size):]
            slots = p % size  # (B, T): a full layout's size is max_tokens, so slot p for position p
            held.scatter_(1, slots, p)
            out[key] = slots
        return out

    @property
    def rewindable(self) -> bool:
        """Every layer forgets its last positions by moving the positions back (a ring as far as its spare
        slots allow: ``rewind_floor``): what speculative decoding does with the draft tokens the target
        rejects (tfcalc.measure.speculative). A recurrent state cannot."""
        return all(s.rewindable for s in self.states)

    @property
    def widest_step(self) -> int | None:
        """The most tokens per sequence a step may write before it reads (None: any): a ring's spare + 1."""
        widths = [w for s in self.states if (w := getattr(s, "widest_step", None)) is not None]
        return min(widths, default=None)

    def rewind(self, length: int) -> None:
        """Forget every position from ``length`` on (their slots are hidden, then overwritten)."""
        if not self.rewindable:
            raise InputError("a cache with a recurrent state overwrites its values: it cannot rewind")
        if not 0 < length <= self.length:
            raise InputError(f"rewind to {length}: the cache holds {self.length} positions")
        self.high = max(self.high, self.length)  # length only falls here: the most ever written
        floor = max((s.rewind_floor(self.high) for s in self.states if hasattr(s, "rewind_floor")), default=0)
        if length < floor:
            raise InputError(f"rewind to {length}: a sliding window's or chunk's ring has overwritten the positions "
                             f"before {floor} a later query needs (its spare slots: new_cache(..., spare=...))")
        self.length = length
        self.next_pos.fill_(length)
        for held in self.slot_pos.values():
            held.masked_fill_(held >= length, -1)

    def volatile(self) -> tuple[torch.Tensor, ...]:
        """What a step advances besides the slots it writes: the positions and each state's ``carried``
        tensors. A graph's warm-up and capture run a step whose effect is put back from a copy of these."""
        return (self.next_pos, *self.slot_pos.values(), *(t for s in self.states for t in s.carried))

    def slot_positions(self, layer: int) -> torch.Tensor:
        """(B, slots): the position each slot of ``layer`` holds, -1 where empty."""
        return self.slot_pos[self.layouts[layer]]

    def rows(self, rows: slice) -> StaticCache:
        """A view of some rows (buffers shared, written through): tfcalc.model.slots."""
        view = object.__new__(StaticCache)
        view.__dict__.update(self.__dict__)
        view.states = [s.rows(rows) for s in self.states]
        view.slot_pos = {key: t[rows] for key, t in self.slot_pos.items()}
        view.next_pos = self.next_pos[rows]
        view.batch = view.next_pos.shape[0]
        view.cross, view.active = None, None  # a row's prefill runs it alone
        return view
