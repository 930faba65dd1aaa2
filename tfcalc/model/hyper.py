"""Manifold-constrained hyper-connections in the real model (tfcalc.architecture.block has the description), as
transformers 5.24's DeepseekV4HyperConnection and DeepseekV4HyperHead compute them (modeling_deepseek_v4.py, citing
Xie et al. 2026 and the DeepSeek-V4 report §2.2), in fp32 as there: the residual stream is n streams (B, T, n, d).

Each sub-layer: the n·d streams, RMS-normed without weight, projected to n(n + 2) mixing logits (``fn``, ``base``,
``scale``): pre = sigmoid(·) + eps (n) collapses the streams into the sub-layer's input Σ pre_j·x_j; post =
2·sigmoid(·) (n) spreads its output; comb = softmax(·) + eps (n × n), projected toward a doubly-stochastic matrix
by Sinkhorn-Knopp (columns, then rows and columns ``sinkhorn_iters`` - 1 times), mixes the streams: out = post ⊗ y
+ combᵀ · x. The model's input is the embedding copied to the n streams; before the final norm ``HyperHead``
collapses them by sigmoid weights of their own projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def unweighted_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """DeepseekV4UnweightedRMSNorm."""
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps).to(x.dtype)


class HyperConnection(nn.Module):
    def __init__(self, hyper, d: int, norm_eps: float):
        super().__init__()
        n = hyper.streams
        self.n, self.iters, self.eps, self.norm_eps = n, hyper.sinkhorn_iters, hyper.eps, norm_eps
        self.fn = nn.Parameter(torch.empty(n * (n + 2), n * d))
        self.base = nn.Parameter(torch.empty(n * (n + 2)))
        self.scale = nn.Parameter(torch.empty(3))

    def weights(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, n, d) -> pre (B, T, n), post (B, T, n), comb (B, T, n, n), fp32."""
        n = self.n
        flat = unweighted_rms(x.flatten(2).float(), self.norm_eps)
        pre, post, comb = F.linear(flat, self.fn.float()).split([n, n, n * n], dim=-1)
        pre_b, post_b, comb_b = self.base.float().split([n, n, n * n])
        s = self.scale.float()
        pre = torch.sigmoid(pre * s[0] + pre_b) + self.eps
        post = 2 * torch.sigmoid(post * s[1] + post_b)
        comb = torch.softmax(comb.unflatten(-1, (n, n)) * s[2] + comb_b.view(n, n), dim=-1) + self.eps
        comb = comb / (comb.sum(dim=-2, keepdim=True) + self.eps)
        for _ in range(self.iters - 1):
            comb = comb / (comb.sum(dim=-1, keepdim=True) + self.eps)
            comb = comb / (comb.sum(dim=-2, keepdim=True) + self.eps)
        return pre, post, comb

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None, post=None, comb=None):
        """Called twice per sub-layer (module calls both, so FlopCounterMode counts them here, not in the sub-layer):
        x (B, T, n, d) -> (post, comb, the collapse (B, T, d) the sub-layer reads); then with the sub-layer's output
        y (B, T, d) and those post and comb -> the streams mixed (B, T, n, d)."""
        if y is None:
            pre, post, comb = self.weights(x)
            return post, comb, (pre[..., None] * x).sum(dim=2).to(x.dtype)
        return post.to(x.dtype)[..., None] * y[..., None, :] + torch.matmul(comb.to(x.dtype).mT, x)

    def around(self, x: torch.Tensor, sublayer) -> torch.Tensor:
        """x (B, T, n, d) -> the streams after ``sublayer`` ((B, T, d) -> (B, T, d)) read their collapse."""
        post, comb, collapsed = self(x)
        return self(x, sublayer(collapsed), post, comb)


class HyperHead(nn.Module):
    """DeepseekV4HyperHead: (B, T, n, d) -> (B, T, d), Σ_j (sigmoid(·) + eps)_j · x_j."""

    def __init__(self, hyper, d: int, norm_eps: float):
        super().__init__()
        n = hyper.streams
        self.eps, self.norm_eps = hyper.eps, norm_eps
        self.hc_fn = nn.Parameter(torch.empty(n, n * d))
        self.hc_base = nn.Parameter(torch.empty(n))
        self.hc_scale = nn.Parameter(torch.empty(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixes = F.linear(unweighted_rms(x.flatten(2).float(), self.norm_eps), self.hc_fn.float())
        pre = torch.sigmoid(mixes * self.hc_scale.float() + self.hc_base.float()) + self.eps
        return (pre[..., None] * x).sum(dim=2).to(x.dtype)
