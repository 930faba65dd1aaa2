"""The torch module of Zamba2's hybrid layer (tfcalc.architecture.zamba2; transformers' Zamba2HybridLayer,
modeling_zamba2.py): the shared block -- its parameters the same tensors in every layer that uses it, so they exist
once (``named_parameters`` yields them once, under the first layer's path; ``share``) -- then the layer's own adapters,
Linear and Mamba2 mixer. Its state: the shared attention's K and V for this use, beside the Mamba2 state
(tfcalc.model.attention_ssm, the protocol's forwarding shared with Falcon-H1: the attention's layout, both parts'
tensors)."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from tfcalc.model.attention_ssm import AttentionSsmMixer
from tfcalc.model.ffn import FeedForward, ffn_hidden
from tfcalc.model.layers import Attention, Linear, make_norm
from tfcalc.model.mixers import build_mixer


class SharedBlock(nn.Module):
    """Zamba2AttentionDecoderLayer's weights: the 2d-wide input norm, the attention over [h | e] (O back to d), the
    FFN norm and the gated MLP. No residual inside (the block's output goes through the use's Linear)."""

    def __init__(self, spec):
        super().__init__()
        d = spec.d_model
        self.in_norm = make_norm(dataclasses.replace(spec.norm, width=2 * d))
        self.attn = Attention(spec.attention)
        self.attn.out = Linear(spec.attention.out_width, d, bias=False)  # O: 2d -> d (Zamba2Attention.o_proj)
        self.ff_norm = make_norm(spec.norm)
        self.ffn = FeedForward(spec.mlp)


def lora(n_in: int, rank: int, n_out: int) -> nn.Sequential:
    """x -> B(A(x)), A n_in -> r (``0``), B r -> n_out (``1``), no biases: transformers' adapter, an nn.Sequential of
    two Linears, named as it names them."""
    return nn.Sequential(Linear(n_in, rank, bias=False), Linear(rank, n_out, bias=False))


class Zamba2HybridModule(AttentionSsmMixer):
    def __init__(self, spec):
        super().__init__()
        d, f, r = spec.d_model, spec.mlp.d_ff, spec.adapter_rank
        self.spec = spec
        self.shared = SharedBlock(spec)
        # the modules of one key hold one SharedBlock (``share``); an untied copy is its own
        self.shared_key = None if spec.spare_adapters else ("zamba2", spec.shared_id)
        self.rope_key, self.temperature = self.shared.attn.rope_key, None
        self.gate_up_adapter = lora(d, r, 2 * f)
        for p in "qkv":  # Zamba2Attention's linear_{q,k,v}_adapter of this use
            setattr(self, f"{p}_adapter", lora(2 * d, r, 2 * d) if spec.attn_adapters else None)
        self.linear = Linear(d, d, bias=False)
        # the other uses' adapter sets an untied copy holds, never run (tfcalc.architecture.zamba2)
        self.spare_adapters = nn.ModuleList(nn.ModuleDict(
            {p: lora(d, r, 2 * f) if p == "gate_up" else lora(2 * d, r, 2 * d)
             for p in ("gate_up", *("qkv" if spec.attn_adapters else ""))}) for _ in range(spec.spare_adapters))
        self.ssm_norm = make_norm(spec.norm)
        self.ssm = build_mixer(spec.ssm)

    def share(self, owner: Zamba2HybridModule) -> None:
        """Hold the owner's shared block's parameters (the same tensors; a module of its own, named by its layer)."""
        for (path, _), (_, p) in zip(list(self.shared.named_parameters()), list(owner.shared.named_parameters()),
                                     strict=True):
            module, _, name = path.rpartition(".")
            setattr(self.shared.get_submodule(module), name, p)

    def attention_state(self, batch: int, max_tokens: int, device, dtype):
        return self.shared.attn.new_state(batch, max_tokens, device, dtype)  # this use's own K and V

    def _attention(self, u: torch.Tensor, rope, mask, store) -> torch.Tensor:
        """The shared attention on u (B, T, 2d), each of Q, K and V plus this use's adapter where it has them."""
        att = self.shared.attn
        if self.q_adapter is None:
            return att(u, rope, mask, store=store)
        extra = torch.cat([a(u) for a in (self.q_adapter, self.k_adapter, self.v_adapter)], dim=-1)  # (B, T, 6d)
        # the fused projection plus the adapters, as Zamba2Attention adds each to its projection: an instance
        # attribute shadows the registered submodule for this call (the module tree is never changed)
        object.__setattr__(att, "qkv", _Plus(att._modules["qkv"], extra))
        try:
            return att(u, rope, mask, store=store)
        finally:
            del att.__dict__["qkv"]

    def forward(self, x: torch.Tensor, rope=None, mask=None, store=None, emb=None) -> torch.Tensor:
        """x: the residual stream h (B, T, d) -- the block norms nothing (``own_norm``) -- and emb (B, T, d) -> what
        the layer adds to h: mamba(norm(h + t)), t the use's Linear of the shared block's output."""
        attn_store, ssm_store = self.split_store(store)
        s = self.shared
        u = s.in_norm(torch.cat([x, emb], dim=-1))  # (B, T, 2d): [h | e], as Zamba2AttentionDecoderLayer concats
        a = s.ff_norm(self._attention(u, rope, mask, attn_store))  # (B, T, d)
        gate_up = s.ffn.up(a) + self.gate_up_adapter(a)  # (B, T, 2f): [gate | up]
        t = self.linear(s.ffn.down(ffn_hidden(s.ffn.spec, gate_up)))  # (B, T, d)
        return self.ssm(self.ssm_norm(x + t), None, None, store=ssm_store)


class _Plus:
    """A projection whose output has ``extra`` added (the adapters' outputs of the same input)."""

    def __init__(self, linear: nn.Module, extra: torch.Tensor):
        self.linear, self.extra = linear, extra

    def __call__(self, u: torch.Tensor) -> torch.Tensor:
        return self.linear(u) + self.extra
