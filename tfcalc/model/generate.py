"""Greedy generation with the static cache: one prefill, then one decode step per new token, run by a
``Decoder`` in one of three modes:

- "eager": the fixed-shape step (tfcalc.model.step) called as is, every op launched from Python: the CPU's
  mode, and ``--eager`` on a GPU;
- "graph" (the default on CUDA): the step captured once per bucket in a CUDA graph (torch.cuda.CUDAGraph,
  static input and output buffers, a warm-up on a side stream first, as PyTorch's CUDA-graph notes do)
  and replayed per token: one launch a step instead of a few hundred, which is what makes a batch-1 step
  run at the GPU's bandwidth rather than at Python's pace (tfcalc's H100 run: 50 ms a token uncaptured with
  a growing key, 6.5 ms captured with fixed shapes, Llama-2-7B);
- "compile": the step through ``torch.compile`` (Inductor's default mode: its elementwise work fused into
  Triton kernels, the GEMMs cuBLAS's), captured in a CUDA graph of tfcalc's own as "graph" is. Not
  reduce-overhead: its CUDA graphs skip a function that mutates its inputs ("skipping cudagraphs due to
  mutated inputs"), and a step writes its state in place, so every step would run uncaptured (tfcalc's
  H100 run, 2026-11-26).

Every mode runs the same step on the same buffers: the positions advance on the device inside the step,
the host keeps its own count (cache.length) to choose the bucket, and nothing is read back. A captured
graph's warm-up writes its junk K and V into the slot the real step writes next, and the positions it
advanced (and any recurrent state it rewrote: the state's ``carried``, tfcalc.model.cache) are put back, so
capturing changes nothing a later step reads.

Greedy (argmax) because tfcalc measures speed, not text: sampling would add a softmax and a draw per
step and change nothing that the roofline counts. The chosen token stays on the device and feeds the
next step directly (no .item(), no printing inside the loop).
"""

from __future__ import annotations

import torch

from tfcalc.errors import InputError
from tfcalc.model.cache import StaticCache
from tfcalc.model.transformer import Transformer

MODES = ("graph", "eager", "compile")


def next_token(logits: torch.Tensor) -> torch.Tensor:
    """(B, 1, V) logits -> (B, 1) greedy token ids."""
    return logits[:, -1].argmax(dim=-1, keepdim=True)


def default_mode(device: torch.device | str) -> str:
    """"graph" on CUDA, "eager" elsewhere (a CPU step has no launches worth saving)."""
    return "graph" if torch.device(device).type == "cuda" else "eager"


class Decoder:
    """Decode steps of ``model`` over ``cache``, one token per sequence each, in ``mode`` (default: the
    device's, ``default_mode``). ``step(token)`` -> logits (B, 1, V)."""

    def __init__(self, model: Transformer, cache: StaticCache, mode: str | None = None):
        device = cache.next_pos.device
        mode = mode or default_mode(device)
        if mode not in MODES:
            raise InputError(f"decode mode {mode!r}: one of {', '.join(MODES)}")
        if mode in ("graph", "compile") and device.type != "cuda":
            raise InputError(f"decode mode {mode!r} captures CUDA graphs: it needs a CUDA device (here: {device})")
        self.model, self.cache, self.mode = model, cache, mode
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}  # per bucket: graph, its output
        self.capture_error: str | None = None
        self.token = torch.zeros(cache.batch, 1, dtype=torch.long, device=device)  # the graphs' static input
        # what a captured step runs: Inductor's kernels in "compile" (compiled on the first warm-up)
        self._run = torch.compile(model.step, dynamic=False) if mode == "compile" else model.step

    def step(self, token: torch.Tensor) -> torch.Tensor:
        """One token per sequence (B, 1) at the cache's next position -> its logits (B, 1, V)."""
        cache = self.cache
        if cache.length == 0:
            raise InputError("a decode step continues a prompt: call prefill() first")
        cache.check_room(1)
        span = cache.bucket(1)
        if self.mode == "eager":
            logits = self.model.step(token, cache, span)
        else:
            captured = self.graphs.get(span) or self._capture(span)
            if captured is None:  # the step cannot be captured: run uncaptured from now on, and say so
                return self._eager_from_now(token, span)
            graph, out = captured
            self.token.copy_(token)
            graph.replay()
            logits = out.clone()  # the graph's output buffer is overwritten by the next replay
        cache.length += 1
        return logits

    def prepare(self, spans) -> None:
        """Capture (and compile), now, the graphs of every span a later step will read, so that no timed step
        includes a capture; nothing in "eager" mode. Each run here writes its junk into the slot the next real
        step writes, and the positions are put back after it."""
        for span in dict.fromkeys(spans):
            if self.mode != "eager" and span not in self.graphs and self._capture(span) is None:
                self.mode = "eager"

    def _not_captured(self, error: Exception, positions, saved) -> None:
        """The positions put back, the reason kept: the caller runs the step eagerly."""
        torch.cuda.synchronize()
        _put_back(positions, saved)
        self.capture_error = str(error).splitlines()[0]

    def _eager_from_now(self, token: torch.Tensor, span: int) -> torch.Tensor:
        self.mode = "eager"
        logits = self.model.step(token, self.cache, span)
        self.cache.length += 1
        return logits

    def _capture(self, span: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor] | None:
        """The step over ``span`` slots captured in a CUDA graph, the positions as they were before; None
        when the step cannot be captured (a layer that reads a value back to the host), the reason kept in
        ``capture_error``."""
        cache = self.cache
        positions = cache.volatile()
        saved = [t.clone() for t in positions]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        # Two warm-ups on a side stream, as PyTorch's CUDA-graph notes do. The first chooses the kernels, plans
        # cuDNN attention's graph for this shape and allocates workspaces, which may synchronize; the second
        # runs under PyTorch's sync debug mode set to raise on any op that waits for the device: a step that
        # does cannot be captured, and is not tried. Each writes its junk into the next slot; the positions
        # are put back after each.
        mode, error = torch.cuda.get_sync_debug_mode(), None
        try:
            with torch.cuda.stream(side):
                self._run(self.token, cache, span)
                _put_back(positions, saved)
                torch.cuda.set_sync_debug_mode("error")
                self._run(self.token, cache, span)
        except RuntimeError as e:
            error = e
        finally:
            torch.cuda.set_sync_debug_mode(mode)  # before anything below synchronizes
        torch.cuda.current_stream().wait_stream(side)
        if error is not None:
            return self._not_captured(error, positions, saved)
        graph = torch.cuda.CUDAGraph()
        try:
            _put_back(positions, saved)
            with torch.cuda.graph(graph):
                out = self._run(self.token, cache, span)
        except RuntimeError as e:  # e.g. "operation not permitted when stream is capturing"
            return self._not_captured(e, positions, saved)
        self.graphs[span] = (graph, out)
        return graph, out


def _put_back(positions: list[torch.Tensor], saved: list[torch.Tensor]) -> None:
    """The cache's volatile tensors (positions, a recurrent state's carried tensors) as they were before a
    warm-up, a capture or a compiled run wrote its junk step into them."""
    for t, s in zip(positions, saved, strict=True):
        t.copy_(s)


@torch.inference_mode()
def generate(model: Transformer, prompt: torch.Tensor, new_tokens: int, cache: StaticCache | None = None,
             src_idx: torch.Tensor | None = None, mode: str | None = None) -> torch.Tensor:
    """(B, T) prompt -> (B, new_tokens) greedy continuation: the prefill yields the first new token, each
    of the new_tokens - 1 decode steps one more (a Decoder in ``mode``, default the device's). The cache
    needs T + new_tokens - 1 positions (the last token is never fed back); a cache made here has exactly
    that."""
    B, T = prompt.shape
    cache = cache or model.new_cache(B, T + new_tokens - 1)
    token = next_token(model.prefill(prompt, cache, src_idx))
    decoder = Decoder(model, cache, mode)
    out = [token]
    for _ in range(new_tokens - 1):
        token = next_token(decoder.step(token))
        out.append(token)
    return torch.cat(out, dim=1)
