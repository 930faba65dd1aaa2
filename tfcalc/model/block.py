"""One layer of the real model, built from its ``Block`` component (tfcalc.architecture.block): the block
builds the torch module its mixer component names (tfcalc.model.mixers: softmax or latent attention, or any
other mixer, never told apart here) and its FFN class, as litgpt's model.py Block picks its classes from
its config, so a stack's layers may differ (dense then MoE, local then global attention, RoPE or none)."""

from __future__ import annotations

import torch
from torch import nn

from tfcalc.architecture import Block as BlockSpec
from tfcalc.model import altup, fused
from tfcalc.model.experts import MixtureOfExperts
from tfcalc.model.ffn import FeedForward
from tfcalc.model.hyper import HyperConnection
from tfcalc.model.layers import make_norm
from tfcalc.model.mixers import build_mixer
from tfcalc.model.per_layer import PerLayerGate


def _forward_adds_residual(module: nn.Module) -> bool:
    """Whether ``module``'s forward takes the stream to add into: declared (``adds_residual = True``) by the
    class that defines the forward it runs, so a subclass that writes its own forward does not inherit the
    answer silently (Falcon-H1's ParallelMixersModule subclasses Attention and sums two mixers)."""
    owner = next(c for c in type(module).__mro__ if "forward" in vars(c))
    return vars(owner).get("adds_residual", False) is True


class Block(nn.Module):
    """Self-attention, cross-attention (an encoder-decoder's decoder, or cross_attention), FFN or mixture
    of experts; each a residual sub-layer with its own norm, laid out pre, post or sandwich, or attention
    and FFN side by side (a parallel block). Norm modules are named as ``BlockSpec.norms()`` names them
    (attn_norm, attn_post_norm, cross_attn_norm, cross_attn_post_norm, ffn_norm, ffn_post_norm): the
    names checkpoints and the counts read."""

    def __init__(self, spec: BlockSpec):
        super().__init__()
        self.spec = spec
        self.placement, self.parallel = spec.placement, spec.parallel != "none"
        self.residual_scale = spec.residual_scale  # Granite's residual_multiplier
        norms = dict(spec.norms())

        def norm(name: str) -> nn.Module | None:
            return make_norm(spec.norm) if name in norms else None

        self.attn_norm = norm("attn_norm")
        self.attn = build_mixer(spec.mixer)  # the torch module its component names (tfcalc.model.mixers)
        self.attn_post_norm = norm("attn_post_norm")
        cross = spec.cross_attention
        self.cross_attn_norm = norm("cross_attn_norm")
        self.cross_attn = build_mixer(cross) if cross is not None else None
        self.cross_attn_post_norm = norm("cross_attn_post_norm")
        self.ffn_norm = norm("ffn_norm")
        absent = not spec.is_moe and spec.ffn.absent  # a block of its mixer alone (Mamba2Block)
        self.ffn = None if absent else MixtureOfExperts(spec.ffn) if spec.is_moe else FeedForward(spec.ffn)
        self.ffn_post_norm = norm("ffn_post_norm")
        hyper, d = spec.hyper, spec.mixer.d_model  # DeepSeek-V4's hyper-connections (tfcalc.model.hyper)
        self.attn_hc = HyperConnection(hyper, d, spec.norm.eps) if hyper is not None else None
        self.ffn_hc = HyperConnection(hyper, d, spec.norm.eps) if hyper is not None else None
        # Gemma 4's per-layer input, after the FFN (tfcalc.model.per_layer; its inputs bound by the stack)
        self.ple = PerLayerGate(spec.per_layer_input, spec.norm) \
            if spec.per_layer_input is not None else None
        # Gemma 3n: AltUp's predict and correct around the block, LAuReL beside its attention (tfcalc.model.altup)
        self.altup = altup.AltUp(spec.altup, spec.norm) if spec.altup is not None else None
        self.laurel = altup.Laurel(spec.laurel, spec.norm) if spec.laurel is not None else None
        if spec.layer_scalar:  # Gemma 4's layer_scalar: a buffer, as transformers keeps it (no parameter)
            self.register_buffer("layer_scalar", torch.empty(1))

    def reset_buffers(self) -> None:
        """Gemma 4's layer_scalar starts at 1 (Gemma4PreTrainedModel._init_weights); a checkpoint sets it."""
        if self.spec.layer_scalar:
            self.layer_scalar.fill_(1.0)

    def _branch(self, norm: nn.Module | None, post_norm: nn.Module | None, f, x: torch.Tensor) -> torch.Tensor:
        """What a sub-layer adds to the residual stream x (pre, sandwich and output; post-norm is not
        additive). OLMo 2's output placement has no input norm."""
        y = f(x if norm is None else norm(x))
        y = y if post_norm is None else post_norm(y)  # Gemma 2: norm the output before the residual add
        return y if self.residual_scale is None else y * self.residual_scale  # modeling_granite.py

    def _residual(self, norm: nn.Module, post_norm: nn.Module | None, f, x: torch.Tensor) -> torch.Tensor:
        if self.placement == "normed_residual":  # MiniMax-01 (MiniMaxDecoderLayer): α·norm(x) + β·f(norm(x))
            h = norm(x)
            y = f(h)
            h = h if self.spec.residual_alpha is None else h * self.spec.residual_alpha
            return h + (y if self.residual_scale is None else y * self.residual_scale)
        if self.placement == "post":  # Vaswani et al. 2017, BERT: norm(x + f(x))
            y = f(x)
            return norm(x + (y if self.residual_scale is None else y * self.residual_scale))
        return x + self._branch(norm, post_norm, f, x)  # GPT-2 onwards: x + f(norm(x))

    def _adds_into(self, module: nn.Module | None, post_norm: nn.Module | None) -> bool:
        """Whether a runtime step's sub-layer may hand ``module`` the stream to add its output into
        (layers.add_projection): x + f(norm(x)) with nothing between f's last matmul and the add."""
        return (self.placement in ("pre", "sandwich") and post_norm is None and self.residual_scale is None
                and module is not None and _forward_adds_residual(module))

    @staticmethod
    def _step_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """A runtime step's norm: an RMSNorm on CUDA as one compiled kernel (tfcalc.model.fused)."""
        if type(norm) is nn.RMSNorm and fused.enabled(x):
            return fused.rms_norm.fused(x, norm.weight, norm.eps)
        return norm(x)

    def attention_sublayer(self, x: torch.Tensor, rope=None, mask=None, store=None, fold: bool = False,
                           emb=None) -> torch.Tensor:
        # the stack's embeddings, to a mixer that reads them (Zamba2's shared block)
        more = {"emb": emb} if emb is not None and getattr(self.spec.mixer, "reads_embeddings", False) else {}
        if fold and self.attn_norm is not None and self._adds_into(self.attn, self.attn_post_norm):
            return self.attn(self._step_norm(self.attn_norm, x), rope, mask, store=store, residual=x, **more)
        return self._residual(self.attn_norm, self.attn_post_norm,
                              lambda h: self.attn(h, rope, mask, store=store, **more), x)

    def cross_attention_sublayer(self, x: torch.Tensor, memory: torch.Tensor | None, kv=None) -> torch.Tensor:
        return self._residual(self.cross_attn_norm, self.cross_attn_post_norm,
                              lambda h: self.cross_attn(h, memory, kv), x)

    def ffn_call(self, rows: torch.Tensor | None, raw: torch.Tensor | None = None):
        """The FFN as a sub-layer calls it (here, and Gemma 3n's AltUp block, tfcalc.model.altup): a mixture of
        experts told which rows are in flight (``rows``), so that a free row takes no expert capacity
        (tfcalc.model.experts), and (Gemma 4's experts beside the MLP) the block's input before its norm
        (``raw``); a dense FFN needs no telling."""
        if (rows is None and raw is None) or not isinstance(self.ffn, MixtureOfExperts):
            return self.ffn
        return lambda h: self.ffn(h, rows=rows, raw=raw)

    def ffn_sublayer(self, x: torch.Tensor, rows: torch.Tensor | None = None, fold: bool = False) -> torch.Tensor:
        norm = self.ffn_norm if self.ffn_norm is not None else self.attn_norm  # one shared norm: GPT-J, Falcon
        if fold and norm is not None and self._adds_into(self.ffn, self.ffn_post_norm):
            return self.ffn(self._step_norm(norm, x), residual=x)
        raw = x if self.spec.is_moe and self.spec.ffn.beside_mlp is not None else None
        return self._residual(norm, self.ffn_post_norm, self.ffn_call(rows, raw), x)

    def _shortcut_sublayer(self, x: torch.Tensor, rows: torch.Tensor | None, carry: list) -> torch.Tensor:
        """LongCat-Flash's shortcut MoE (LongcatFlashDecoderLayer): the experts and the dense FFN (the MoE's shared
        expert) read one norm's output; the dense FFN joins here, the routed experts' output waits in ``carry``
        for the next block (tfcalc.architecture.block, ``shortcut``)."""
        routed, dense = self.ffn.parts(self.ffn_norm(x), rows)
        carry.append(routed)
        return x if dense is None else x + dense

    def forward(self, x: torch.Tensor, rope=None, mask=None, memory: torch.Tensor | None = None,
                store=None, cross_kv=None, rows: torch.Tensor | None = None, fold: bool = False,
                emb=None, carry: list | None = None) -> torch.Tensor:
        """``rope``: this layer's (cos, sin), or None (no RoPE in this layer); ``mask``: its mask (its
        window); ``store`` and ``cross_kv`` when decoding with a cache (see Stack.forward); ``rows`` (B,), 1
        for a sequence in flight and 0 for a free row of continuous batching (tfcalc.model.slots). ``fold``:
        a runtime step's (tfcalc.model.step), out of autograd, whose stream x no one else holds: each
        sub-layer's last matmul may add its output into x in place (_adds_into). ``emb`` the stack's
        embeddings (B, T, d), given where a mixer reads them (``reads_embeddings``: Zamba2's). ``carry``: the
        stack's list, one per pass, through which a shortcut block hands its routed experts' output to the next
        block, which adds it after its FFN (LongCat-Flash's ScMoE); needed by a stack with shortcut blocks."""
        if self.parallel:
            return self._parallel(x, rope, mask, store, rows)
        if self.attn_hc is not None:  # x: (B, T, n, d), n hyper-connection streams
            x = self.attn_hc.around(x, lambda h: self.attn(self.attn_norm(h), rope, mask, store=store))
            return self.ffn_hc.around(x, lambda h: self.ffn_call(rows)(self.ffn_norm(h)))
        if self.altup is not None:  # x: AltUp's streams (B, T, n·d)
            return altup.block_forward(self, x, rope, mask, store, rows)
        x = self._sublayers(x, rope, mask, memory, store, cross_kv, rows, fold, emb, carry)
        x = x if self.ple is None else self.ple(x)
        return x * self.layer_scalar if self.spec.layer_scalar else x  # Gemma 4: after every residual add

    def _sublayers(self, x, rope, mask, memory, store, cross_kv, rows, fold: bool = False, emb=None,
                   carry: list | None = None) -> torch.Tensor:
        if getattr(self.spec.mixer, "sublayer", True):  # not an FFN-alone layer (Nemotron-H's - and E)
            x = self.attention_sublayer(x, rope, mask, store, fold, emb)
        if self.cross_attn is not None:
            if memory is None and cross_kv is None:
                raise ValueError("a block with cross-attention needs the states it attends to (memory)")
            x = self.cross_attention_sublayer(x, memory, cross_kv)
        if self.spec.shortcut:
            if carry is None:
                raise ValueError("a shortcut MoE block hands its experts' output on: call it with the stack's carry")
            return self._shortcut_sublayer(x, rows, carry)
        x = x if self.ffn is None else self.ffn_sublayer(x, rows, fold)
        return x + carry.pop() if carry else x  # the previous block's shortcut experts (LongcatFlashDecoderLayer)

    def _parallel(self, x: torch.Tensor, rope, mask, store=None, rows=None) -> torch.Tensor:
        """x + attn(n1(x)) + ffn(n2(x)) (GPT-NeoX, modeling_gpt_neox.py, use_parallel_residual), or with one
        norm output read by both (Falcon-7B, modeling_falcon.py; GPT-J; PaLM, Chowdhery et al. 2022, sec. 2)."""
        h = self.attn_norm(x)
        y = self.attn(h, rope, mask, store=store) + self.ffn_call(rows)(
            h if self.ffn_norm is None else self.ffn_norm(x))
        return x + (y if self.residual_scale is None else y * self.residual_scale)
