"""QLoRA's NF4 base (tfcalc.count.model.qlora): each tensor's bytes against bitsandbytes' own QuantState (where
installed) and the paper's 4.127 bits a weight; bitsandbytes keeps no input of a 4-bit linear for the backward;
the paper's 65B figure."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from tfcalc.count.model import lora, qlora, training_memory as training
from tfcalc.presets import load

LLAMA_65B = ["d_model=8192", "n_layer=80", "n_head=64", "n_kv_head=64", "d_ff=22016"]  # Touvron et al. 2023, Table 2


@pytest.mark.parametrize("shape", [(11008, 4096), (4096, 4096), (100, 64), (64, 33), (3, 5)])
def test_nf4_tensor_bytes_equal_bitsandbytes_quant_state(shape):
    bnb = pytest.importorskip("bitsandbytes")
    linear = bnb.nn.Linear4bit(shape[1], shape[0], bias=False, compute_dtype=torch.bfloat16, compress_statistics=True,
                               quant_type="nf4")
    linear.weight.data = torch.randn(*shape)
    linear = linear.to("cpu")  # quantizes
    state = linear.weight.quant_state
    tensors = [linear.weight, state.absmax, state.code, state.state2.absmax, state.state2.code, state.offset]
    assert sum(t.numel() * t.element_size() for t in tensors) == qlora.nf4_bytes(shape[0] * shape[1])


def test_four_point_one_two_seven_bits_a_weight():
    """Dettmers et al. 2023 sec. 3: 4 bits, and 8/64 + 32/(64·256) = 0.127 bits of constants a parameter."""
    n = 64 * 256 * 1000
    assert qlora.nf4_bytes(n) * 8 / n == pytest.approx(4 + 8 / 64 + 32 / (64 * 256), abs=1e-3)


def test_bitsandbytes_keeps_no_input_of_a_4bit_linear():
    """MatMul4Bit keeps the quantized weight alone (bitsandbytes/autograd/_functions.py): the input, once nothing
    else holds it, is freed before the backward -- LoRA's step 3b holds under QLoRA."""
    bnb = pytest.importorskip("bitsandbytes")
    linear = bnb.nn.Linear4bit(64, 128, bias=False, compute_dtype=torch.float32, quant_type="nf4").to("cpu")
    source = torch.randn(4, 64, requires_grad=True)
    x = source * 2  # not a leaf: nothing but the graph's savers could hold it
    gone = weakref.ref(x)
    out = linear(x).sum()
    del x
    gc.collect()
    assert gone() is None
    out.backward()
    assert source.grad is not None and source.grad.shape == (4, 64)


def test_the_papers_65b_from_over_780_gb_to_under_48_gb():
    """Dettmers et al. 2023, abstract: a 65B model's finetuning needs over 780 GB of GPU memory, under 48 GB with
    QLoRA -- full fine-tuning's 16 bytes a parameter, against an NF4 base and rank-64 adapters on every linear (its
    sec. 4 setup), their Adam state in fp32 (activations apart)."""
    cfg = load("llama2-7b", LLAMA_65B)
    full = training.training_state(cfg, "bf16", "adam-mixed")
    spec = lora.LoraSpec(64, lora.TARGETS, "nf4")
    base = qlora.base_bytes(lora.linears(cfg), full.params, 2)
    state = lora.lora_state(full, cfg, spec)
    assert full.total > 780e9
    assert base + (state.total - state.weights) + 2 * lora.trainable_params(cfg, spec) < 48e9
