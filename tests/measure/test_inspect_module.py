"""Any nn.Module (issue 32): tfcalc.inspect counts parameters (shared tensors once, buffers apart), FLOPs per
module under FlopCounterMode (SDPA included) and the activations a training step saves; a model built from
tfcalc's own configs gives the figures of its analytic count."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tfcalc
from tfcalc.count.model import memory as mem, params as count
from tfcalc.count.model.flops import forward_flops
from tfcalc.errors import InputError
from tfcalc.model import build_model
from tfcalc.presets import load
from tfcalc.workload import Workload

TINY = {
    "gpt2-tiny": ("gpt2", ["n_layer=2", "d_model=64", "n_head=4", "vocab_size=97", "max_seq_len=32"]),
    "llama-tiny": ("llama2-7b", ["n_layer=2", "d_model=64", "n_head=4", "n_kv_head=2", "vocab_size=97",
                                 "max_seq_len=32", "d_ff=96"]),
}
B, T = 2, 16


@pytest.mark.parametrize("name", TINY)
def test_a_model_of_tfcalcs_configs_gives_its_analytic_figures(name):
    cfg = load(*TINY[name])
    model = build_model(cfg, "cpu", torch.float32)
    idx = torch.zeros(B, T, dtype=torch.long)
    r = tfcalc.inspect(model, idx).inspection
    assert r.params == count.total(cfg)
    assert r.flops == forward_flops(cfg, Workload(batch=B, seq=T))
    stored = mem.activations(cfg, Workload(batch=B, seq=T, dtype="fp32")).stored
    # tfcalc's analytic stored bytes include the loss's fp32 log-probabilities, 4·V a token (tfcalc.count.
    # activations); the default loss, a sum of the outputs, keeps none
    assert r.saved_bytes == stored - 4 * B * T * cfg.vocab_size
    def loss(logits):  # tfcalc's own training loss (tfcalc.measure.memory.forward_loss): the count to the byte
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), idx.view(-1))

    assert tfcalc.inspect(model, idx, loss=loss).inspection.saved_bytes == stored
    rows = {row.path: row for row in r.rows}
    blocks = [rows[f"blocks.{i}"] for i in range(cfg.n_layer)]
    assert rows["blocks"].flops == sum(b.flops for b in blocks)  # a ModuleList holds what its blocks ran
    assert rows[""].params == r.params and rows[""].flops == r.flops


class Tied(nn.Module):
    """An embedding and LM head sharing one tensor, two PyTorch encoder layers, a buffer."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(32, 4, 64, batch_first=True) for _ in range(2)])
        self.head = nn.Linear(32, 100, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("mask", torch.ones(16, 16))

    def forward(self, x):
        h = self.emb(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def test_shared_tensors_count_once_and_buffers_apart():
    r = tfcalc.inspect(Tied()).inspection
    # by hand: TransformerEncoderLayer(32, 4, 64): in_proj 3·32·32 + 96, out_proj 32·32 + 32, linear1 32·64 + 64,
    # linear2 64·32 + 32, two norms 2·64 = 8,544; the embedding 100·32; the head is the embedding's tensor
    assert r.params == 100 * 32 + 2 * 8544 == 20_288
    assert r.buffers == 256 and r.buffer_bytes == 1024 and r.flops is None and r.saved_bytes is None
    assert {row.path: row.params for row in r.rows}["head"] == 3200  # the head's own view of its weight


class Attend(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads, self.qkv = heads, nn.Linear(d, 3 * d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)


def test_sdpa_is_counted_on_the_cpu():
    x = torch.randn(2, 16, 32)
    r = tfcalc.inspect(Attend(), x).inspection
    qkv = 2 * 2 * 16 * 32 * 96  # 2·m·k·n
    scores = 2 * (2 * 2 * 4 * 16 * 16 * 8)  # Q·Kᵀ and A·V, each 2·B·nh·T·T·hs, full square
    assert {row.path: row.flops for row in r.rows}["qkv"] == qkv and r.flops == qkv + scores


def test_hostile_modules_and_inputs_are_one_line_errors():
    with pytest.raises(InputError, match="expected a torch.nn.Module; got 3"):
        tfcalc.inspect(3)
    with pytest.raises(InputError, match="Attend's forward on the example inputs raised RuntimeError") as e:
        tfcalc.inspect(Attend(), torch.randn(2, 16, 5))
    assert "\n" not in str(e.value)
    with pytest.raises(InputError, match="loss must be a function"):
        tfcalc.inspect(Attend(), torch.randn(2, 16, 32), loss=3)


def test_on_meta_the_saved_bytes_are_not_counted():
    cfg = load(*TINY["gpt2-tiny"])
    r = tfcalc.inspect(build_model(cfg, "meta", torch.float32), torch.zeros(B, T, dtype=torch.long, device="meta"))
    assert r.inspection.flops == forward_flops(cfg, Workload(batch=B, seq=T)) and r.inspection.saved_bytes is None
