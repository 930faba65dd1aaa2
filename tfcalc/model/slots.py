"""A KV cache of slots, one sequence each at its own length, and a decode step over all of them at once:
what continuous batching runs (Yu et al. 2022, "Orca", OSDI, sec. 3: iteration-level scheduling; a
sequence joins after its prefill and leaves when done, the others decoding on).

Layout: a StaticCache (tfcalc.model.cache) of ``rows`` sequences × ``max_tokens`` positions, a row per
slot, each row with its own positions on the device (``next_pos``, and the position each slot holds). The
sequences in flight are kept in rows 0 .. n - 1 (``release`` moves the last one into a freed row: a copy
of its state, the price of a contiguous batch without paged attention). A prefill writes one row through
a batch-1 view of the buffers (``row``). A decode step (``decode_rows``) is the one fixed-shape step of
tfcalc.model.step over all ``rows`` slots, whatever the occupancy: each row's token at its own position
(RoPE, learned positions, a window's or chunk's ring, ALiBi's distances: all from the device positions),
over a span of slots that covers the longest row in flight (its bucket, ``span``), each row masking the slots
it has not written: padded attention, as a contiguous batch of unequal lengths runs it (vLLM's paged attention
reads each sequence's own blocks instead; the weights, read once per step for the whole batch, are the same).

Why the longest row's bucket, with rows of very different lengths: a row reads slots 0 .. span - 1 of its own
cache, so the span must cover the longest row's live positions, and one span for all rows is what one SDPA
call over a (rows, heads, span, width) state takes; any shorter span would cut the longest row's keys. The
rows shorter than it read masked slots: with rows of 1,000 and 100,000 positions in a cache of 131,072,
each row reads 131,072 slots (the bucket of 100,001), 2 × 131,072 keys per layer where a paged or
variable-length kernel (FlashAttention's varlen, vLLM's paged attention) reads 1,001 + 100,001. That excess
is the price of this contiguous layout, not of the span's choice: it is the smallest span that is right,
rounded up to a power of two so that one captured step serves a bucket of lengths. What a step reads is
counted at that span (tfcalc.count.serving.continuous.rows_step_s), and the measured run reports it
(tfcalc.measure.continuous).

Fixed shape (issue 29): the rows not in flight are computed too and their results discarded, so a row
joining or leaving changes no op and no shape (one CUDA graph per bucket serves every occupancy). Which rows
are in flight is a device tensor (``active``, 1 or 0 per row), written at ``admit`` and ``release`` and
read by no host code. A free row is parked at position 0: its step writes slot 0 of its own free row (a
scratch position: no sequence is there, and the next ``admit``'s prefill rewrites what the row keeps;
a recurrent state's free row is likewise rewritten whole by that prefill), and after the step its position
goes back to 0 (``next_pos *= active``), so nothing a sequence in flight reads is touched and a free row's
position never runs past the positions the model has. The cost: every step computes ``rows`` tokens, not
the n in flight (the weights are read once either way; the extra rows' FLOPs, activations and the keys
they read, at most ``span`` slots each, are the price of one shape for every occupancy). A model whose
experts have a capacity (Switch Transformers, sec. 2.2) is told which rows are in flight (the cache's
``active``, read on the device): a free row's tokens take no place in an expert's buffer, and the buffers
keep the capacity of the tokens in flight, so each row in flight gets what a batch of the rows in flight
alone would give it (tfcalc.model.experts).
"""

from __future__ import annotations

import torch

from tfcalc.config import ModelConfig
from tfcalc.errors import InputError
from tfcalc.model.cache import StaticCache, bucket
from tfcalc.model.transformer import Transformer


def check_slots(cfg: ModelConfig, what: str) -> None:
    """InputError unless a slot cache and decode_rows run cfg: a decoder-only language model (what a decode
    step does not build, T5's relative bias, is refused by check_decodable)."""
    if cfg.arch != "decoder" or cfg.cross_attention or not cfg.lm_head:
        raise InputError(f"{what}: {cfg.name} is not a decoder-only language model")
    if cfg.pos_encoding == "relative":
        raise InputError(f"{what}: {cfg.name}'s relative position biases are not built for decoding")


class SlotCache:
    """The state of up to ``rows`` sequences of up to ``max_tokens`` positions; rows 0 .. n - 1 in flight."""

    def __init__(self, model: Transformer, rows: int, max_tokens: int):
        self.base = model.new_cache(rows, max_tokens)
        self.rows, self.max_tokens = rows, max_tokens
        self.lengths: list[int] = []  # per row in flight: positions written (host-known, never read back)
        device = self.base.next_pos.device
        self.active = torch.zeros(rows, dtype=torch.long, device=device)  # (rows,): 1 in flight, 0 free
        self.base.active = self.active  # a step's experts give a free row no capacity (tfcalc.model.experts)
        self.tokens = torch.zeros(rows, 1, dtype=torch.long, device=device)  # (rows, 1): the step's input

    @property
    def n(self) -> int:
        return len(self.lengths)

    @property
    def nbytes(self) -> int:
        return self.base.nbytes

    @property
    def span(self) -> int:
        """The slots the next decode step reads of every row: the bucket of the longest row in flight, its
        new position included (the module docstring); host-known, nothing read back."""
        return bucket(max(self.lengths) + 1, self.max_tokens)

    def row(self, r: int) -> StaticCache:
        """A batch-1 StaticCache over row r's buffers (views: a prefill through it writes the row)."""
        view = self.base.rows(slice(r, r + 1))
        view.length = 0
        return view

    def admit(self, prompt: torch.Tensor, model: Transformer) -> torch.Tensor:
        """Prefill prompt (1, T) into the next free row; its logits (1, 1, V)."""
        if self.n == self.rows:
            raise InputError(f"all {self.rows} slots are in flight")
        r = self.n
        logits = model.prefill(prompt, self.row(r))
        self.lengths.append(prompt.shape[1])
        self.active[r] = 1
        return logits

    def release(self, r: int) -> None:
        """Row r is done: the last row in flight moves into it (its state, positions and length)."""
        last = self.n - 1
        if r != last:
            for state in self.base.states:
                for t in state.tensors:
                    t[r] = t[last]
            for t in (*self.base.slot_pos.values(), self.base.next_pos):
                t[r] = t[last]
            self.lengths[r] = self.lengths[last]
        self.lengths.pop()
        self.active[last] = 0
        self.base.next_pos[last] = 0  # parked: a free row steps at position 0 (the module docstring)


def decode_rows(model: Transformer, tokens: torch.Tensor, cache: SlotCache) -> torch.Tensor:
    """One decode step of every sequence in flight, row i at position cache.lengths[i]; each row's length
    grows by one. tokens (rows, 1), one per slot (a free row's is ignored) -> logits (rows, 1, V), a free
    row's meaningless: the fixed-shape step (the module docstring). tokens (n, 1), one per sequence in
    flight, are copied into the slots' token buffer first -> logits (n, 1, V)."""
    n, rows = cache.n, cache.rows
    if tokens.shape not in ((n, 1), (rows, 1)):
        raise InputError(f"decode_rows takes one token for each of the {n} sequences in flight "
                         f"(or for each of the {rows} slots)")
    if n == 0:
        raise InputError("decode_rows: no sequence is in flight (admit one first)")
    if max(cache.lengths) >= cache.max_tokens:
        raise InputError(f"a sequence would pass the {cache.max_tokens} positions its slot holds")
    whole = tokens.shape[0] == rows
    if not whole:
        cache.tokens[:n].copy_(tokens)
    logits = model.step(tokens if whole else cache.tokens, cache.base, cache.span)  # (rows, 1, V)
    cache.base.next_pos.mul_(cache.active)  # the free rows back to position 0, on the device
    cache.lengths = [length + 1 for length in cache.lengths]
    return logits if whole else logits[:n]
