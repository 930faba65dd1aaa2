"""A mixture of experts' bytes: gpt-oss's MXFP4 experts counted as stored (tfcalc.count.model.quant), the experts
a serving step reads at each batch (tfcalc.count.serving.roofline), and a checkpoint that stores MXFP4 blocks."""

from __future__ import annotations

import json

import pytest
import torch
from hub_moe import GPT_OSS_20B
from safetensors.torch import save_file

import tfcalc
from tfcalc.checkpoint import count_checkpoint
from tfcalc.config import replace
from tfcalc.count.model import params as count, quant
from tfcalc.count.serving import roofline
from tfcalc.errors import InputError
from tfcalc.presets import load


def _experts_and_rest(cfg) -> tuple[int, int]:
    """(routed experts' weight elements, every other parameter), by hand: 3 matrices of d·f per expert."""
    experts = cfg.n_layer * cfg.n_expert * 3 * cfg.d_model * cfg.ffn_dim
    return experts, count.total(cfg) - experts


@pytest.mark.parametrize("name, expected", [("gpt-oss-120b", 65_248_815_744), ("gpt-oss-20b", 13_761_264_768)])
def test_mxfp4_experts_are_4_25_bits_and_the_rest_bf16(name, expected):
    cfg = load(name)
    experts, rest = _experts_and_rest(cfg)
    assert experts * 17 // 32 + rest * 2 == expected  # 4.25 bits = 17/32 bytes; d = f = 2880 is 90 blocks of 32
    fmt = quant.weight_format("bf16")
    assert quant.weights_bytes(cfg, fmt) == expected
    parts = quant.breakdown(cfg, fmt)
    assert parts == {"mxfp4_experts": experts // 2, "mxfp4_scales": experts // 32, "unquantized": rest * 2}
    assert quant.format_label(cfg, fmt) == "bf16, routed experts MXFP4 (4.25 bits per weight)"
    plain = replace(cfg, expert_format=None)  # the same model, every weight in bf16
    assert quant.weights_bytes(plain, fmt) == 2 * count.total(cfg)
    # a quantized --dtype quantizes every matrix alike, the experts too: the config's format does not apply
    int4 = quant.weight_format("int4")
    assert quant.weights_bytes(cfg, int4) == quant.weights_bytes(plain, int4)


def test_memory_and_infer_show_the_stored_format(cli):
    r = cli("memory", "gpt-oss-20b", "--json")
    data = r.json()
    assert data["weights_bytes"] == 13_761_264_768 and data["weight_format"]["experts"] == "mxfp4"
    assert sum(data["weight_format"]["parts_bytes"].values()) == data["weights_bytes"]
    table = cli("memory", "gpt-oss-20b").out
    assert "MXFP4" in table and "4.25 bits" in table
    infer = cli("infer", "gpt-oss-20b", "--seq", "4096", "--json").json()
    assert infer["weights_bytes"] == 13_761_264_768 and infer["weight_format"]["experts"] == "mxfp4"
    assert cli("infer", "mixtral", "--seq", "512", "--json").json()["weight_format"]["experts"] is None


@pytest.mark.parametrize("batch", [1, 8, 64, 4096])
def test_a_step_reads_the_experts_its_tokens_route_to(cli, batch):
    """Decode at batch b reads E·(1 − (1 − k/E)^b) experts per layer: k at batch 1, all E once a batch
    touches them all; the roofline's expert rows carry that share of the experts' (MXFP4) bytes."""
    cfg = load("gpt-oss-120b")
    E, k = 128, 4
    touched = E * (1 - (1 - k / E) ** batch)
    data = cli("infer", "gpt-oss-120b", "--seq", "1024", "--batch", str(batch), "--json").json()
    assert data["experts_read"]["decode_per_layer"] == pytest.approx(touched)
    assert data["experts_read"]["prefill_per_layer"] == pytest.approx(E * (1 - (1 - k / E) ** (batch * 1024)))
    if batch == 1:
        assert touched == pytest.approx(k)
    if batch == 4096:
        assert touched == pytest.approx(E)
    fmt = quant.weight_format("bf16")
    step = roofline.decode_step(cfg, batch, 1024, fmt, "bf16")
    expert_bytes = sum(r.weight_bytes for r in step.rows if r.component.startswith("expert_ffn"))
    experts, _ = _experts_and_rest(cfg)
    stored = experts * 17 // 32 + 2 * cfg.n_layer * E * (2 * cfg.ffn_dim + cfg.d_model)  # MXFP4 weights, bf16 biases
    assert expert_bytes == pytest.approx(stored * touched / E, rel=1e-6)
    assert "Experts' weights read per layer" in cli("infer", "gpt-oss-120b", "--seq", "1024", "--batch",
                                                    str(batch)).out


def test_an_mxfp4_checkpoint_counts_two_values_per_byte_and_names_its_scales(tmp_path):
    """The released gpt-oss layout: *_blocks (E, out, in/32, 16) uint8, *_scales (E, out, in/32) uint8."""
    config = {**GPT_OSS_20B, "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 32, "head_dim": 16,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "vocab_size": 50,
              "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 64,
              "rope_scaling": None}  # YaRN, which load_model refuses first, left out
    (tmp_path / "config.json").write_text(json.dumps(config))
    cfg = load(str(tmp_path / "config.json"))
    assert cfg.expert_format == "mxfp4"
    d, f, E, q, kv = 64, 32, 4, 64, 32  # 4 heads and 2 KV heads of 16
    tensors = {"model.embed_tokens.weight": torch.zeros(50, d), "lm_head.weight": torch.zeros(50, d),
               "model.norm.weight": torch.zeros(d)}
    for i in range(2):
        p = f"model.layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": torch.zeros(d), p + "post_attention_layernorm.weight": torch.zeros(d),
            p + "self_attn.q_proj.weight": torch.zeros(q, d), p + "self_attn.q_proj.bias": torch.zeros(q),
            p + "self_attn.k_proj.weight": torch.zeros(kv, d), p + "self_attn.k_proj.bias": torch.zeros(kv),
            p + "self_attn.v_proj.weight": torch.zeros(kv, d), p + "self_attn.v_proj.bias": torch.zeros(kv),
            p + "self_attn.o_proj.weight": torch.zeros(d, q), p + "self_attn.o_proj.bias": torch.zeros(d),
            p + "self_attn.sinks": torch.zeros(4), p + "mlp.router.weight": torch.zeros(E, d),
            p + "mlp.router.bias": torch.zeros(E),
            p + "mlp.experts.gate_up_proj_blocks": torch.zeros(E, 2 * f, d // 32, 16, dtype=torch.uint8),
            p + "mlp.experts.gate_up_proj_scales": torch.zeros(E, 2 * f, d // 32, dtype=torch.uint8),
            p + "mlp.experts.gate_up_proj_bias": torch.zeros(E, 2 * f),
            p + "mlp.experts.down_proj_blocks": torch.zeros(E, d, f // 32, 16, dtype=torch.uint8),
            p + "mlp.experts.down_proj_scales": torch.zeros(E, d, f // 32, dtype=torch.uint8),
            p + "mlp.experts.down_proj_bias": torch.zeros(E, d),
        })
    save_file(tensors, str(tmp_path / "model.safetensors"))
    c = count_checkpoint(cfg, tmp_path)
    assert c.total == sum(t.numel() for t in tensors.values())  # checkpoint_total: the elements in the files
    assert c.agrees and c.matched == count.total(cfg)
    assert sorted(c.scales) == sorted(n for n in tensors if n.endswith("_scales"))
    assert sum(c.scales.values()) == 2 * E * (2 * f * d // 32 + d * f // 32)
    with pytest.raises(InputError, match="is an MXFP4 tensor: tfcalc's loader reads unquantized weights"):
        tfcalc.load_model(str(tmp_path))
