"""The dense FFN of the real model, built from its ``FFN`` component (tfcalc.architecture): d_model -> d_ff
-> d_model, gated (SwiGLU, GeGLU: one fused [gate | up] projection) or not, with its activation; the
mixture of experts' experts run the same hidden (tfcalc.model.experts)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.architecture import FFN
from tfcalc.model import fused
from tfcalc.model.layers import Linear, add_projection
from tfcalc.model.sparsity import gaussian_topk

# the FFN's activations by the config's name; also those of the per-layer inputs (tfcalc.model.per_layer) and
# of BERT's prediction head (tfcalc.model.transformer)
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "relu2": lambda x: torch.square(F.relu(x)),  # squared ReLU (So et al. 2021, Primer; Nemotron-H's relu2)
    "silu": F.silu,
}


class FeedForward(nn.Module):
    """d_model -> d_ff -> d_model as its ``FFN`` component describes it; gated: down(act(gate) · up)."""

    def __init__(self, spec: FFN):
        super().__init__()
        self.spec, self.gated, self.width = spec, spec.gated, spec.d_ff
        self.up = Linear(spec.d_model, spec.d_ff * (2 if spec.gated else 1), bias=spec.bias)  # rows [gate | up]
        self.down = Linear(spec.d_ff, spec.d_model, bias=spec.bias)
        self.act = XIELU() if spec.activation == "xielu" else None
        # what fused.silu_mul computes: silu(gate) · up, nothing clamped or scaled
        self.swiglu = (spec.gated and spec.activation == "silu" and spec.swiglu_limit is None
                       and spec.multipliers is None and not spec.sparsity)

    adds_residual = True  # forward takes the stream it adds into (add_projection)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        h = self.up(x)
        if self.act is not None:
            hidden = self.act(h)
        elif residual is not None and self.swiglu and fused.enabled(h):  # a runtime step on CUDA: one kernel
            hidden = fused.silu_mul.fused(h)
        else:
            hidden = ffn_hidden(self.spec, h)
        if self.spec.multipliers is not None:  # FalconH1MLP's down multiplier: the product, then the sum
            y = self.down(hidden) * self.spec.multipliers[1]
            return y if residual is None else residual + y
        return add_projection(residual, self.down, hidden)

    def fused_rows(self) -> dict[str, int]:
        """The rows of the up projection: [gate | up] when gated."""
        return {"gate": self.width, "up": self.width} if self.gated else {"up": self.width}


class XIELU(nn.Module):
    """xIELU (Huang et al. 2024, arXiv 2411.13010) as transformers' activations.py XIELUActivation computes it
    (its Python path): learned a_p, a_n of shape (1,), α_p = softplus(a_p), α_n = β + softplus(a_n);
    x > 0: α_p·x² + β·x, else (expm1(min(x, eps)) − x)·α_n + β·x. β and eps are buffers of shape () there,
    0.5 and −1e-6 (never set from config.json), stored in checkpoints: loaded as buffers here too."""

    def __init__(self):
        super().__init__()
        self.alpha_p = nn.Parameter(torch.empty(1))
        self.alpha_n = nn.Parameter(torch.empty(1))
        self.register_buffer("beta", torch.empty(()))
        self.register_buffer("eps", torch.empty(()))

    def reset_buffers(self) -> None:
        """transformers' defaults (XIELUActivation(beta=0.5, eps=-1e-6), as ApertusMLP builds it)."""
        self.beta.fill_(0.5)
        self.eps.fill_(-1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha_p = F.softplus(self.alpha_p)
        alpha_n = self.beta + F.softplus(self.alpha_n)
        return torch.where(x > 0, alpha_p * x * x + self.beta * x,
                           (torch.expm1(torch.minimum(x, self.eps)) - x) * alpha_n + self.beta * x)


def ffn_hidden(spec: FFN, h: torch.Tensor) -> torch.Tensor:
    """The up projection's output (..., m·f) -> the hidden state the down projection reads (..., f):
    act(h), or act(gate) · up of its halves [gate | up] when gated; gpt-oss's clamped SwiGLU
    (modeling_gpt_oss.py, GptOssExperts._apply_gate): g·sigmoid(alpha·g) · (u + 1), g = min(gate, limit),
    u = clamp(up, -limit, limit)."""
    act = ACTIVATIONS[spec.activation]
    scale = 1.0 if spec.multipliers is None else spec.multipliers[0]  # FalconH1MLP: act(gate_proj(x) · m)
    if not spec.gated:
        return act(h if spec.multipliers is None else h * scale)
    gate, up = h.chunk(2, dim=-1)
    gate = gate if spec.multipliers is None else gate * scale
    gate = gate if not spec.sparsity else gaussian_topk(gate, spec.sparsity)  # Gemma 3n (tfcalc.model.sparsity)
    if spec.swiglu_limit is None:
        return act(gate) * up
    limit = spec.swiglu_limit
    gate, up = gate.clamp(max=limit), up.clamp(min=-limit, max=limit)
    if spec.swiglu_alpha is None:  # DeepSeek-V4's (DeepseekV4MLP): the plain SwiGLU of the clamped halves
        return act(gate) * up
    return gate * torch.sigmoid(gate * spec.swiglu_alpha) * (up + 1)
