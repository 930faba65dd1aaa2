"""A static, preallocated KV cache for decoding (the gpt-fast design): every layer's K and V buffers are
allocated once, for the whole generation, and written in place; nothing grows or is re-allocated per
token, so a decode step allocates only its own small activations.

Layout: per layer, K of shape (B, n_kv_head, slots, d_head) and V (B, n_kv_head, slots, v_head_dim), in
the model's dtype, each layer's heads and widths as its ``Attention`` component has them (layers may
differ). ``slots`` is that component's ``kv_positions`` of the longest sequence the generation reaches,
the convention tfcalc.count.model.memory counts the KV bytes with (``Architecture.kv_elements``): in a layer
without a sliding window, every position, slot p holding position p; a decode step writes its token's K
and V, then attends to slots 0..p (views, no copy).

A layer with a sliding window of W (Mistral's every layer; Gemma 2's every other one) keeps the W - 1
past positions a decode step needs -- the cache Hugging Face's generate() grows (cache_utils.py,
DynamicSlidingWindowLayer keeps ``[-sliding_window + 1:]`` between steps) -- so ``slots`` =
min(W - 1, longest sequence), a ring: position p lives in slot p mod (W - 1), overwriting p - W + 1,
which no later query may see (Jiang et al. 2023, sec. 2, "rolling buffer cache"). A decode step attends
to the filled slots and its own K and V, concatenated (W keys, itself included), then writes its K and
V into the ring. (transformers' StaticSlidingWindowLayer allocates W slots instead, one for the
incoming token: the same W keys at attention time.)

A layer with chunked attention of C (Llama 4) keeps the C - 1 past positions of the current chunk:
position p in slot p mod C, the chunk's last position never (no later query of its chunk reads it); a
decode step attends to the slots before p mod C and its own K and V, concatenated.

Keys are stored after RoPE (rotated at their own absolute positions), so the order of the slots never
matters to attention: softmax over keys is permutation-invariant. Only ALiBi needs each slot's position
(its bias depends on the distance), which ``slot_positions`` gives.

Use: ``Transformer.new_cache(batch, max_tokens)``, then ``prefill`` (the prompt, from position 0) and
``decode`` (one token per sequence per call), or ``extend`` (several, in a layer without a window or
chunk: a speculative verify step), and ``rewind`` to forget rejected positions. The cache's position
counter lives on the host (a Python int), so a decode step never waits for the device to say where to write.
"""

from __future__ import annotations

import torch

from tfcalc.architecture import Attention, LatentAttention
from tfcalc.config import ModelConfig
from tfcalc.errors import InputError


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
    slots = {b.attention.kv_positions(max_tokens) for b in cfg.architecture.output.layers()}
    chunked = any(b.attention.chunk is not None for b in cfg.architecture.output.layers())
    if cfg.pos_encoding == "alibi" and (len(slots) > 1 or chunked):
        raise InputError(f"{cfg.name}: ALiBi with alternating windows is not built for decoding")


def _shapes(a) -> tuple[tuple[int, int], tuple[int, int]]:
    """(heads, width) of a layer's K and V buffers; a latent attention keeps its latent in the first and its
    rotary key in the second, one head each (tfcalc.model.latent), as transformers' cache does."""
    if isinstance(a, LatentAttention):
        return (1, a.kv_lora_rank), (1, a.qk_rope_head_dim)
    return (a.n_kv_head, a.head_dim), (a.n_kv_head, a.v_dim)


class StaticCache:
    """K and V buffers of every self-attention layer, and an encoder-decoder's cross-attention K and V."""

    def __init__(self, attentions: list[Attention], batch: int, max_tokens: int, device, dtype: torch.dtype):
        """``attentions``: each decoder layer's self-attention component, first to last."""
        self.batch, self.max_tokens = batch, max_tokens
        self.slots = [a.kv_positions(max_tokens) for a in attentions]  # per layer
        self.chunks = [a.chunk for a in attentions]  # per layer: its chunk, None without
        self.windows = [a.window for a in attentions]  # per layer: its sliding window, None without
        shapes = [_shapes(a) for a in attentions]
        self.k = [torch.zeros(batch, heads, n, hs, device=device, dtype=dtype)  # (B, nkv, S, hs)
                  for ((heads, hs), _), n in zip(shapes, self.slots, strict=True)]
        self.v = [torch.zeros(batch, heads, n, hv, device=device, dtype=dtype)  # (B, nkv, S, hv)
                  for (_, (heads, hv)), n in zip(shapes, self.slots, strict=True)]
        self.cross: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer (B, nkv, S_src, hs) each
        self.length = 0  # positions written: the next token's position

    @property
    def nbytes(self) -> int:
        """Bytes of the self-attention buffers (and the cross-attention K and V once computed)."""
        tensors = self.k + self.v + [t for kv in (self.cross or []) for t in kv]
        return sum(t.numel() * t.element_size() for t in tensors)

    def reset(self) -> None:
        """Forget every position (the buffers are kept and overwritten)."""
        self.length, self.cross = 0, None

    def check_room(self, new_tokens: int) -> None:
        if self.length + new_tokens > self.max_tokens:
            raise InputError(f"the cache was set up for {self.max_tokens} tokens; "
                             f"{self.length} are written and {new_tokens} more asked for")

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new positions' K and V (B, nkv, T, hs) of one layer; return what its queries attend to.

        A prompt (the cache empty) attends to itself: its own k and v come back, and only its last
        ``slots`` positions are kept. A decode step (T = 1) attends to every position written so far and
        itself (see the module docstring for windows and chunks)."""
        T, size = k.shape[2], self.slots[layer]
        if self.chunks[layer] is not None:
            return self._store_chunk(layer, k, v)
        if self.length == 0:
            keep = min(T, size)
            if keep:
                slots = torch.arange(T - keep, T, device=k.device) % size  # ring order for a window
                self.k[layer].index_copy_(2, slots, k[:, :, T - keep:])
                self.v[layer].index_copy_(2, slots, v[:, :, T - keep:])
            return k, v
        if T != 1 and (self.windows[layer] is not None or T + self.length > size):
            raise InputError("after the prompt, the cache takes one token per sequence at a time "
                             "(several only in a layer that keeps every position)")
        if self.windows[layer] is not None:
            return self._store_window(layer, k, v)
        slot = self.length  # T > 1: a speculative verify step's tokens, at slots length .. length + T - 1
        self.k[layer][:, :, slot:slot + T] = k
        self.v[layer][:, :, slot:slot + T] = v
        n = min(self.length + T, size)
        return self.k[layer][:, :, :n], self.v[layer][:, :, :n]

    def _store_window(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A decode step of a windowed layer: the ring's filled slots (the last W - 1 positions at most) and
        the new K and V, concatenated; then the new ones written over the oldest slot."""
        size = self.slots[layer]
        n = min(self.length, size)
        keys = torch.cat([self.k[layer][:, :, :n], k], dim=2)  # (B, nkv, n + 1, hs)
        values = torch.cat([self.v[layer][:, :, :n], v], dim=2)
        if size:  # a window of 1 keeps nothing: each query sees itself alone
            self.k[layer][:, :, self.length % size] = k[:, :, 0]
            self.v[layer][:, :, self.length % size] = v[:, :, 0]
        return keys, values

    def key_positions(self, layer: int, device) -> torch.Tensor:
        """The positions of the keys a decode step of ``layer`` attends to, in the order store() returns
        them (ALiBi's bias reads them): the filled slots, then the new token's."""
        if self.windows[layer] is None:
            return self.slot_positions(layer, self.length + 1, device)
        new = torch.tensor([self.length], device=device)
        return torch.cat([self.slot_positions(layer, self.length, device), new])

    def _store_chunk(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """store() for a chunked layer (see the module docstring): a prompt keeps its last, unfinished
        chunk; a decode step reads the chunk's past slots and its own K and V."""
        T, chunk, size = k.shape[2], self.chunks[layer], self.slots[layer]
        if self.length == 0:
            n = T % chunk  # positions of the last chunk, which later tokens of that chunk read
            self.k[layer][:, :, :n] = k[:, :, T - n:]
            self.v[layer][:, :, :n] = v[:, :, T - n:]
            return k, v
        if T != 1:
            raise InputError("after the prompt, the cache takes one token per sequence at a time")
        r = self.length % chunk  # the new token's place in its chunk: r earlier keys of the chunk are cached
        keys = torch.cat([self.k[layer][:, :, :r], k], dim=2)  # (B, nkv, r + 1, hs)
        values = torch.cat([self.v[layer][:, :, :r], v], dim=2)
        if r < size:  # the chunk's last position is read by no later query
            self.k[layer][:, :, r] = k[:, :, 0]
            self.v[layer][:, :, r] = v[:, :, 0]
        return keys, values

    def advance(self, tokens: int) -> None:
        """Called once every layer has stored the new positions."""
        self.length += tokens

    @property
    def rewindable(self) -> bool:
        """Every layer keeps every position in its own slot (no window's or chunk's ring), so forgetting
        the last positions is only moving the counter back: what speculative decoding does with the draft
        tokens the target rejects (tfcalc.measure.speculative)."""
        return all(w is None for w in self.windows) and all(c is None for c in self.chunks)

    def rewind(self, length: int) -> None:
        """Forget every position from ``length`` on (their slots are overwritten by the next tokens)."""
        if not self.rewindable:
            raise InputError("a cache with sliding windows or chunks overwrites its slots: it cannot rewind")
        if not 0 < length <= self.length:
            raise InputError(f"rewind to {length}: the cache holds {self.length} positions")
        self.length = length

    def slot_positions(self, layer: int, length: int, device) -> torch.Tensor:
        """The position each filled slot of ``layer`` holds once ``length`` positions are written, (n,)
        int64 with n = min(length, slots): slot s holds the latest position p < length with p mod slots = s."""
        size = self.slots[layer]
        n = min(length, size)
        s = torch.arange(n, device=device)
        if n == 0:
            return s
        return s + size * torch.div(length - 1 - s, size, rounding_mode="floor")
