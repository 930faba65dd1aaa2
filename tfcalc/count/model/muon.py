"""The Muon optimizer's state and Newton-Schulz arithmetic. Pure arithmetic, no torch.

Muon (Jordan et al. 2024, kellerjordan.github.io/posts/muon; Liu et al. 2025, "Muon is Scalable for LLM
Training", arXiv 2502.16982, sec. 2; torch.optim.Muon, torch/optim/_muon.py) updates each hidden 2-D weight
matrix W with its orthogonalized momentum: one buffer B (torch: B ← lerp(B, G, 1 − μ)), O = NS₅ of the Nesterov
blend lerp(G, B, μ), W ← W − ηO. Everything else -- the embeddings, the LM head, the norms and biases -- stays on
AdamW (both sources: Muon for the hidden matrices only). Which tensors are "hidden matrices": the blocks'
tensors stored with 2 dimensions per copy (torch.optim.Muon refuses any other ``ndim``); a mixture's
routed experts, one grouped (E, m, n) tensor in tfcalc's module, count as E matrices (each expert its own
matrix, as Moonlight's MoE runs them); a fused tensor ([gate | up], Q|K|V) is one matrix, as the module stores it.

State per parameter (``muon``, mixed precision as ``adam-mixed``: the optimizer steps fp32 master copies when
the weights are narrower than fp32, so the buffer, ``torch.zeros_like`` of the master, is fp32):
- a hidden matrix's element: fp32 master 4 (below fp32) + momentum 4 = 8 bytes (bf16), 4 in fp32;
- every other element: fp32 master 4 (below fp32) + AdamW's two moments 8 = 12 bytes (bf16), 8 in fp32;
so the optimizer state is 8·P − 4·M + (4·P below fp32), M the matrices' elements, P all the parameters.

Newton-Schulz (torch/optim/_muon.py ``_zeropower_via_newtonschulz``; the quintic coefficients
(a, b, c) = (3.4445, −4.7750, 2.0315), 5 steps): X is the m × n matrix with m ≤ n (transposed if taller), each
step computes A = X·Xᵀ (2·m²·n FLOPs), B = b·A + c·A·A (one addmm: 2·m³), X ← a·X + B·X (one addmm:
2·m²·n): 4·m²·n + 2·m³ FLOPs a step, 5 × that a matrix. Against the training FLOPs of the matrix (6·m·n per
token, B tokens a step) the overhead is 5·(4m²n + 2m³)/(6mnB) ≤ 5·m/B (m ≤ n): Keller Jordan's T·m/B bound
(his post's FLOP-overhead analysis, below 1 % for typical LM training; at most 0.73 % for the nanoGPT speedrun,
m = 768, B = 524,288 tokens).
"""

from __future__ import annotations

from tfcalc.config import ModelConfig

NS_STEPS = 5
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # torch/optim/_muon.py DEFAULT_A, DEFAULT_B, DEFAULT_C
MOMENTUM_BYTES = 4  # fp32: zeros_like of the fp32 master (module docstring)
ADAM_MOMENT_BYTES = 8


def hidden_matrix(shape: tuple[int, ...], per_block: bool) -> bool:
    """Whether a tensor of this per-copy shape is stepped by Muon (module docstring)."""
    return per_block and len(shape) == 2


def matrix_params(cfg: ModelConfig) -> int:
    """M: the elements of every hidden matrix of the model (experts' copies included, tied tensors once)."""
    return sum(p.total for p in cfg.architecture.weights()
               if not p.weight.tied_to and hidden_matrix(tuple(p.weight.shape), p.where == "block"))


def largest_matrix(cfg: ModelConfig) -> tuple[int, int]:
    """(m, n), m ≤ n, of the largest hidden matrix as the module stores it (by elements; parts the module fuses,
    Q|K|V and [gate | up], joined by rows as tfcalc.count.training.shard joins them); (0, 0) when there is none."""
    shapes = []
    for _, block, _ in cfg.architecture.kinds():
        joined: dict[str, tuple[int, int]] = {}
        for i, w in enumerate(block.weights()):
            if w.tied_to or not hidden_matrix(tuple(w.shape), True):
                continue
            key = f"{w.name.rsplit('_', 2)[0]}_{w.fused}" if w.fused else str(i)
            rows, cols = joined.get(key, (0, w.shape[1]))
            joined[key] = (rows + w.shape[0], cols)
        shapes += [tuple(sorted(s)) for s in joined.values()]
    return max(shapes, key=lambda s: s[0] * s[1], default=(0, 0))


def ns_flops(rows: int, cols: int, steps: int = NS_STEPS) -> int:
    """FLOPs of Newton-Schulz on one rows × cols matrix (module docstring): steps · (4m²n + 2m³), m ≤ n."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4 * m * m * n + 2 * m ** 3)


def state_bytes(params: int, matrices: int) -> int:
    """Optimizer state of ``params`` elements of which ``matrices`` are hidden matrices' (module docstring),
    the fp32 master (below fp32) counted apart, as TrainingState.master_weights counts it."""
    return MOMENTUM_BYTES * matrices + ADAM_MOMENT_BYTES * (params - matrices)
