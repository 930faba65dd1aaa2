"""The Muon optimizer on the real module, for measured runs (tfcalc.measure.memory) and the tests' reference:
torch.optim.Muon (torch/optim/_muon.py) on the blocks' 2-D weights, AdamW on everything else (embeddings, LM
head, norms, biases: Jordan et al. 2024; Moonlight, arXiv 2502.16982, sec. 2.2), stepped on fp32 master copies
when the weights are narrower than fp32 (as tfcalc.count.model.muon counts it). A mixture's grouped (E, m, n)
expert tensor, which torch.optim.Muon refuses (2-D only), is stepped here as E matrices: one momentum buffer the
tensor's size, Newton-Schulz on each expert's matrix (the paper's algorithm, torch's coefficients).
"""

from __future__ import annotations

import torch

from tfcalc.count.model.muon import NS_COEFFICIENTS, NS_STEPS


def hidden_matrices(model) -> tuple[list, list]:
    """(Muon's parameters, AdamW's): a parameter of the blocks stored with 2 dimensions (3: grouped experts)."""
    muon, adamw = [], []
    for name, p in model.named_parameters():
        in_block = "blocks." in name
        (muon if in_block and p.ndim in (2, 3) else adamw).append(p)
    return muon, adamw


def newton_schulz(g: torch.Tensor, steps: int = NS_STEPS) -> torch.Tensor:
    """Orthogonalize the last two dims of ``g`` in bf16 (tfcalc.count.model.muon, "Newton-Schulz")."""
    a, b, c = NS_COEFFICIENTS
    x = g.bfloat16()
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=1e-7)
    for _ in range(steps):
        gram = x @ x.mT  # (.., m, m): 2·m²·n
        x = a * x + (b * gram + c * gram @ gram) @ x  # 2·m³, then 2·m²·n
    return x.mT if tall else x


class _GroupedMuon:
    """Muon on 3-D grouped experts: one momentum buffer each (torch.optim.Muon's update, Nesterov)."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.95):
        self.params, self.lr, self.momentum = list(params), lr, momentum
        self.state: dict = {}

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            buf = self.state.setdefault(p, {"momentum_buffer": torch.zeros_like(p)})["momentum_buffer"]
            buf.lerp_(p.grad, 1 - self.momentum)
            p.add_(newton_schulz(p.grad.lerp(buf, self.momentum)).to(p.dtype), alpha=-self.lr)


class MasterMuon:
    """Muon + AdamW over fp32 masters (the weights themselves in fp32), one tensor at a time as tfcalc.measure.memory's
    mixed-precision Adam steps (so the fp32 copy of a gradient exists for one tensor only): ``optimizers`` one per
    tensor, torch.optim.Muon for a 2-D matrix, _GroupedMuon for grouped experts, AdamW for the rest."""

    def __init__(self, model, foreach: bool = False):
        matrices, rest = hidden_matrices(model)
        self.pairs = [(p, p if p.dtype == torch.float32 else p.detach().float().requires_grad_())
                      for p in matrices + rest]
        kinds = [torch.optim.Muon if p.ndim == 2 else _GroupedMuon for p in matrices] + [None] * len(rest)
        self.optimizers = [kind([m]) if kind is not None else torch.optim.AdamW([m], foreach=foreach)
                           for (_, m), kind in zip(self.pairs, kinds, strict=True)]

    def step(self) -> None:
        for (p, master), opt in zip(self.pairs, self.optimizers, strict=True):
            if master is not p:
                master.grad = p.grad.float()
            opt.step()
            if master is not p:
                master.grad = None
                with torch.no_grad():
                    p.copy_(master)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p, _ in self.pairs:
            p.grad = None if set_to_none or p.grad is None else p.grad.zero_()

    @property
    def state(self) -> dict:
        """The inner optimizers' state, by parameter (what tfcalc.measure.rank_bytes.optimizer_tensors reads)."""
        return {p: s for o in self.optimizers for p, s in o.state.items()}

    def state_tensors(self) -> list[torch.Tensor]:
        """Every tensor of the optimizers' state, AdamW's 0-d step counters left out."""
        return [v for s in self.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.ndim > 0]
