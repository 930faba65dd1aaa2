"""Where a hybrid's cost stops growing with the length: its position-mixing FLOPs split between the layers whose
generation state grows with the tokens (softmax attention: K and V of every position, its scores growing like
T² in a forward pass) and the layers whose state does not (a short convolution, a gated DeltaNet: a fixed state,
their mixing growing like T, constant per token). Pure arithmetic, no torch.

Full-square FLOPs (the convention of tfcalc.count.model.flops: FlopCounterMode's, chunked scans over their padded
chunks), over the decoder's layers; the two parts add up to the forward's ``attention_scores`` of a decoder-only
model. The memory side, K/V against the fixed state, is tfcalc.count.model.memory.state_split."""

from __future__ import annotations

from tfcalc.config import ModelConfig
from tfcalc.workload import Workload


def mixing_split(cfg: ModelConfig, w: Workload) -> tuple[int, int]:
    """(FLOPs of the mixing matmuls in layers whose state grows with the tokens, in layers whose state is fixed),
    a forward pass of w.batch sequences of w.seq tokens. A window or a chunk caps a layer's state but its scores
    still grow with T: it counts as growing; a layer with no per-token state at all is fixed."""
    stack, t = cfg.architecture.decoder, w.seq
    growing = fixed = 0
    for b, n in stack.kinds() if stack is not None else ():
        flops = w.batch * n * sum(m.flops for m in b.mixer.mixing(t, t))
        if any(s.per_token for s in b.mixer.state()):
            growing += flops
        else:
            fixed += flops
    return growing, fixed
