"""A KV cache of slots, one sequence each at its own length, and a decode step over all of them at once:
what continuous batching runs (Yu et al. 2022, "Orca", OSDI, sec. 3: iteration-level scheduling; a
sequence joins after its prefill and leaves when done, the others decoding on).

Layout: the buffers of a StaticCache (tfcalc.model.cache) of ``rows`` sequences × ``max_tokens``
positions, a row per slot. The sequences in flight are kept in rows 0 .. n - 1 (``release`` moves the
last one into a freed row: a copy of its K and V, the price of a contiguous batch without paged
attention). A prefill writes one row through a batch-1 view of the buffers (``row``). A decode step
(``decode_rows``) embeds each sequence's token at its own position (RoPE and learned positions per row),
writes each K and V at its row's next slot, and attends over the slots 0 .. L - 1 of the longest row,
masking in each row the slots past its own length: padded attention, as a contiguous batch of unequal
lengths runs it (vLLM's paged attention reads each sequence's own blocks instead; the weights, read once
per step for the whole batch, are the same).

Only for models whose every layer keeps every position (no sliding window or chunk), without position
biases (ALiBi, T5) or Llama 4's position-dependent temperature: ``check_slots`` says which.
"""

from __future__ import annotations

import copy
import functools

import torch

from tfcalc.config import ModelConfig
from tfcalc.errors import InputError
from tfcalc.model.cache import StaticCache
from tfcalc.model.transformer import Transformer


def check_slots(cfg: ModelConfig, what: str) -> None:
    """InputError unless a slot cache and decode_rows run cfg."""
    if cfg.arch != "decoder" or cfg.cross_attention or not cfg.lm_head:
        raise InputError(f"{what}: {cfg.name} is not a decoder-only language model")
    if cfg.pos_encoding in ("alibi", "relative"):
        raise InputError(f"{what}: {cfg.name}'s {cfg.pos_encoding} position biases are not built for sequences at "
                         "different positions in one step")
    for b in cfg.architecture.output.layers():
        a = b.attention
        if a.window is not None or a.chunk is not None:
            raise InputError(f"{what}: {cfg.name} has sliding-window or chunked layers, whose ring caches are not "
                             "built for sequences at different positions in one step")
        if a.temperature is not None:
            raise InputError(f"{what}: {cfg.name}'s position-dependent attention temperature is not built for "
                             "sequences at different positions in one step")


class SlotCache:
    """K and V of up to ``rows`` sequences of up to ``max_tokens`` positions; rows 0 .. n - 1 in flight."""

    def __init__(self, model: Transformer, rows: int, max_tokens: int):
        self.base = model.new_cache(rows, max_tokens)
        self.rows, self.max_tokens = rows, max_tokens
        self.lengths: list[int] = []  # per row in flight: positions written

    @property
    def n(self) -> int:
        return len(self.lengths)

    @property
    def nbytes(self) -> int:
        return self.base.nbytes

    def row(self, r: int) -> StaticCache:
        """A batch-1 StaticCache over row r's buffers (views: a prefill through it writes the row)."""
        view = copy.copy(self.base)
        view.k = [k[r:r + 1] for k in self.base.k]
        view.v = [v[r:r + 1] for v in self.base.v]
        view.batch, view.length, view.cross = 1, 0, None
        return view

    def admit(self, prompt: torch.Tensor, model: Transformer) -> torch.Tensor:
        """Prefill prompt (1, T) into the next free row; its logits (1, 1, V)."""
        if self.n == self.rows:
            raise InputError(f"all {self.rows} slots are in flight")
        r = self.n
        logits = model.prefill(prompt, self.row(r))
        self.lengths.append(prompt.shape[1])
        return logits

    def release(self, r: int) -> None:
        """Row r is done: the last row in flight moves into it (its K, V and length)."""
        last = self.n - 1
        if r != last:
            n = self.lengths[last]
            for buffers in (self.base.k, self.base.v):
                for t in buffers:
                    t[r, :, :n] = t[last, :, :n]
            self.lengths[r] = n
        self.lengths.pop()

    def store(self, layer: int, positions: torch.Tensor, span: int, k: torch.Tensor,
              v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write each row's new K and V (n, nkv, 1, hs) at its own position; the first ``span`` slots of
        every row in flight to attend to."""
        n = k.shape[0]
        rows = torch.arange(n, device=k.device)
        self.base.k[layer][rows, :, positions] = k[:, :, 0]  # (n, nkv, hs) at (row, position)
        self.base.v[layer][rows, :, positions] = v[:, :, 0]
        return self.base.k[layer][:n, :, :span], self.base.v[layer][:n, :, :span]


def decode_rows(model: Transformer, tokens: torch.Tensor, cache: SlotCache) -> torch.Tensor:
    """One decode step of every sequence in flight: tokens (n, 1), row i at position cache.lengths[i] ->
    logits (n, 1, V); each row's length grows by one."""
    n = cache.n
    if tokens.shape != (n, 1):
        raise InputError(f"decode_rows takes one token for each of the {n} sequences in flight")
    if max(cache.lengths) >= cache.max_tokens:
        raise InputError(f"a sequence would pass the {cache.max_tokens} positions its slot holds")
    positions = torch.tensor(cache.lengths, device=tokens.device)  # (n,)
    span = max(cache.lengths) + 1
    x = model.embed(tokens, start=positions)  # (n, 1, d)
    ropes = model._ropes(positions, 1, x.dtype)  # per layer (n, 1, r): attention reads them as (n, 1, 1, r)
    hidden = torch.arange(span, device=tokens.device)[None, :] > positions[:, None]  # (n, S): past each row's end
    mask = torch.zeros(n, 1, 1, span, device=tokens.device, dtype=x.dtype).masked_fill(hidden[:, None, None],
                                                                                          float("-inf"))
    for i, (block, rope) in enumerate(zip(model.blocks, ropes, strict=True)):
        x = block(x, rope, mask, None, store=functools.partial(cache.store, i, positions, span), cross_kv=None)
    cache.lengths = [length + 1 for length in cache.lengths]
    return model.head(x)
