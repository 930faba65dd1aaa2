"""The longcat-flash-chat preset (presets/longcat-flash-chat.yaml) against the sources it cites: the preset equals
LONGCAT_FLASH_CHAT read through tfcalc's HF mapper, field by field; that dict is transformers 5.24's
LongcatFlashConfig defaults (documented against meituan-longcat/LongCat-Flash-Chat) key by key, and agrees with the
keys read from the published config.json by xullnn/llm_computing_resource_est (data/models.json,
archive/PARAMETER_FIX_COMPLETE.md) and with the Meituan LongCat Team's statement (lm-sys/lm-sys.github.io,
blog/2025-09-01-sglang-longcat-flash.md); its parameters by hand, against the paper's 560B total and 18.6B-31.3B
activated (arXiv 2509.01322, abstract). transformers' own count at these sizes is tests/test_longcat_flash.py's."""

from __future__ import annotations

import json
import warnings

import pytest

from tfcalc.count.model import params as count_params
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")

LONGCAT_FLASH_CHAT = {
    "architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash", "vocab_size": 131072,
    "hidden_size": 6144, "num_layers": 28, "num_attention_heads": 64, "ffn_hidden_size": 12288,
    "expert_ffn_hidden_size": 2048, "n_routed_experts": 512, "zero_expert_num": 256, "zero_expert_type": "identity",
    "moe_topk": 12, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "routed_scaling_factor": 6.0, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
    "rope_theta": 10000000.0, "mla_scale_q_lora": True, "mla_scale_kv_lora": True, "attention_bias": False,
    "hidden_act": "silu", "tie_word_embeddings": False,
}
# data/models.json's entry for meituan-longcat/LongCat-Flash-Chat (its names: the config.json key each was read from)
FROM_THE_PUBLISHED_FILE = {"hidden_size": 6144, "num_layers": 28, "num_attention_heads": 64, "vocab_size": 131072,
                           "max_position_embeddings": 131072, "n_routed_experts": 512, "expert_ffn_hidden_size": 2048}
MEITUAN = {"n_routed_experts": 512, "zero_expert_num": 256}  # "512 FFN experts and 256 zero-computation experts"
PAPER_TOTAL, PAPER_ACTIVE = 560e9, (18.6e9, 31.3e9)
IDENTITY = ("name", "nominal_params", "source")  # the preset's own; a config.json names none of them


def _config_json(tmp_path) -> str:
    folder = tmp_path / "LongCat-Flash-Chat"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LONGCAT_FLASH_CHAT))
    return str(folder / "config.json")


def test_the_preset_is_the_transcribed_config_field_by_field(tmp_path):
    ours, theirs = load("longcat-flash-chat").resolved(), load(_config_json(tmp_path)).resolved()
    assert set(ours) == set(theirs)
    assert {k: (ours[k], theirs[k]) for k in ours if k not in IDENTITY and ours[k] != theirs[k]} == {}
    assert load("longcat-flash-chat").architecture == load(_config_json(tmp_path)).architecture


def test_the_transcription_is_transformers_documented_defaults_and_agrees_with_the_other_sources():
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        defaults = transformers.LongcatFlashConfig()
    assert transformers.LongcatFlashConfig.__doc__ and "LongCat-Flash-Chat" in transformers.LongcatFlashConfig.__doc__
    theta = defaults.rope_parameters["rope_theta"]
    skip = ("architectures", "model_type", "zero_expert_type", "rope_theta", "mla_scale_q_lora", "mla_scale_kv_lora")
    assert {k: v for k, v in LONGCAT_FLASH_CHAT.items() if k not in skip and getattr(defaults, k) != v} == {}
    assert theta == LONGCAT_FLASH_CHAT["rope_theta"]
    assert FROM_THE_PUBLISHED_FILE.items() <= LONGCAT_FLASH_CHAT.items()
    assert MEITUAN.items() <= LONGCAT_FLASH_CHAT.items()


def test_parameters_by_hand_against_the_papers_totals():
    """560,664,958,976 = 28 layers, each two latent attentions (q_a, its norm, q_b, kv_a, its norm, kv_b, o), two dense
    FFNs, the router over 768 experts, 512 experts, four norms; the table, the head and the final norm: the paper's
    560B (ratio 1.0012). Active, every pick on a real expert (tfcalc's bound): the total less 28 · (512 - 12)
    experts; without the token table 31.38B against the paper's 31.3B (1.0025), and with all 12 picks on zero
    experts 18.69B against its 18.6B (1.0050)."""
    cfg = load("longcat-flash-chat")
    d, expert = 6144, 3 * 6144 * 2048
    mla = d * 1536 + 1536 + 1536 * 64 * 192 + d * 576 + 512 + 512 * 64 * 256 + 64 * 128 * d
    layer = 2 * mla + 2 * 3 * d * 12288 + 768 * d + 512 * expert + 4 * d
    by_hand = 28 * layer + 2 * 131072 * d + d
    assert count_params.total(cfg) == by_hand == 560_664_958_976
    assert abs(by_hand / PAPER_TOTAL - 1) < 0.002
    active = count_params.active_total(cfg)
    assert active == by_hand - 28 * (512 - 12) * expert == 32_182_654_976
    upper, lower = active - 131072 * d, active - 131072 * d - 28 * 12 * expert
    assert abs(upper / PAPER_ACTIVE[1] - 1) < 0.003 and abs(lower / PAPER_ACTIVE[0] - 1) < 0.006
