"""Kimi K2.5 (model type kimi_k25) against transformers 5.24 (modeling_kimi_k25.py): Kimi K2's language model
(DeepSeek-V3's, tfcalc.hf_config.deepseek) counted, its vision tower and projector counted apart (vision_params).
At full size on meta with Kimi K2's published text config (tests/deepseek_configs.py): parameters exact; the vision
tower's default sizes also derived by hand; a tiny saved checkpoint loaded by load_model gives transformers'
logits; hostile files refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from deepseek_configs import KIMI_K2
from hf_pairs import assert_logits_close, config_json, greedy_uncached

from tfcalc.count.model import params as count_params
from tfcalc.errors import InputError

pytestmark = pytest.mark.filterwarnings("ignore")

TESTED_TYPES = {"kimi_k25"}  # tests/test_hf_config.py: every supported type is tested somewhere

TEXT = dict(model_type="kimi_k2", vocab_size=61, hidden_size=32, intermediate_size=40, moe_intermediate_size=16,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
            num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1,
            kv_lora_rank=12, q_lora_rank=20, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
            max_position_embeddings=64, routed_scaling_factor=2.827)
VISION = dict(num_hidden_layers=2, hidden_size=16, intermediate_size=24, num_attention_heads=2, pos_emb_height=4,
              pos_emb_width=4, patch_size=4)


def _sum(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("tie", [True, False])
def test_full_size_kimi_k2_text_on_meta(tmp_path, tie):
    """Kimi K2's published text config (no quantization_config: bf16 as built) inside Kimi_K25Config on meta: the
    language model with its head (tied by the top-level tie_word_embeddings, transformers' default true) is
    tfcalc's count, the vision tower and mm_projector its vision_params."""
    import transformers

    text = {k: v for k, v in KIMI_K2.items() if k not in ("quantization_config", "rope_scaling")}
    config = transformers.Kimi_K25Config(text_config=text, tie_word_embeddings=tie)
    with torch.device("meta"):
        model = transformers.Kimi_K25ForConditionalGeneration(config)
    cfg = config_json(tmp_path, json.loads(model.config.to_json_string()))
    assert (model.lm_head.weight is model.model.language_model.embed_tokens.weight) == tie == cfg.tie_embeddings
    language = _sum(model.model.language_model) + (0 if tie else model.lm_head.weight.numel())
    assert count_params.total(cfg) == language
    assert cfg.vision_params == _sum(model.model.vision_tower) + _sum(model.model.mm_projector)
    assert (cfg.n_expert, cfg.n_head, cfg.first_dense_layers) == (384, 64, 1)


def test_default_vision_tower_by_hand(tmp_path):
    """Kimi_K25VisionConfig's defaults (MoonViT: h 1152, MLP 4304, 27 blocks, 14×14 patches, a 64×64 position grid,
    2×2 merge) beside a 7168-wide language model, derived by hand: a block 4h (two LayerNorms) + 4(h² + h) (Q, K,
    V, output) + (2·h·4304 + 4304 + h) = 4,608 + 5,313,024 + 9,921,872 = 15,239,504, times 27 = 411,466,608; the
    patch embedding 3·14²·h + h = 678,528; the grid 64·64·h = 4,718,592; the final LayerNorm 2,304: the tower
    416,866,032 (SigLIP-so400m's, as Gemma 3's). The projector over 4h = 4,608: LayerNorm 2·1152 = 2,304,
    4,608² + 4,608 = 21,238,272, 4,608·7,168 + 7,168 = 33,037,312: 54,277,888. Total 471,143,920."""
    cfg = config_json(tmp_path, {"model_type": "kimi_k25", "text_config": {**TEXT, "hidden_size": 7168},
                                 "vision_config": {}})
    assert cfg.vision_params == 416_866_032 + 54_277_888 == 471_143_920


def _published_name(name: str) -> str:
    """transformers 5's name -> the released checkpoints' (the reverse of conversion_mapping.py's kimi_k25 renames
    of the language model: language_model.model.*, language_model.lm_head.*; the vision tower and projector
    only need to be recognised as theirs)."""
    if name.startswith("model.language_model."):
        return "language_model.model." + name.removeprefix("model.language_model.")
    if name.startswith("lm_head."):
        return "language_model." + name
    return name.removeprefix("model.")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Kimi_K25ForConditionalGeneration and two folders of its weights: transformers 5's names
    (model.language_model.*, lm_head, model.vision_tower.*, model.mm_projector.*) and the released checkpoints'
    (language_model.model.*). Written with safetensors directly: transformers 5.24's save_pretrained reverses its
    vision tower's blocks -> layers rename over the language model's layers too (language_model.model.blocks.*),
    names no checkpoint holds."""
    import transformers
    from safetensors.torch import save_file

    torch.manual_seed(0)
    config = transformers.Kimi_K25Config(text_config=TEXT, vision_config=VISION, projection_hidden_size=16,
                                         tie_word_embeddings=False)
    config._attn_implementation = "eager"
    model = transformers.Kimi_K25ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    folders = {}
    for form, rename in (("transformers", lambda n: n), ("published", _published_name)):
        folder = tmp_path_factory.mktemp(form)
        (folder / "config.json").write_text(model.config.to_json_string())
        save_file({rename(k): v for k, v in state.items()}, str(folder / "model.safetensors"))
        folders[form] = folder
    return model, folders


@pytest.mark.parametrize("form", ["transformers", "published"])
def test_tiny_checkpoint_logits(saved, form):
    """The language model of a saved Kimi_K25ForConditionalGeneration, loaded by load_model (its vision tower and
    projector left out), gives transformers' logits, and decodes with its cache as its uncached forward does."""
    import tfcalc
    from tfcalc.model import generate

    model, folders = saved
    ours = tfcalc.load_model(str(folders[form]))
    ids = torch.randint(0, 61, (2, 12), generator=torch.Generator().manual_seed(1))
    assert_logits_close(model, ours, ids)
    assert torch.equal(generate(ours, ids[:, :8], 4), greedy_uncached(ours, ids[:, :8], 4))


@pytest.mark.parametrize("changes, message", [
    (dict(text_config=[1]), "'text_config' must be an object"),
    (dict(vision_config="x"), "'vision_config' must be an object"),
    (dict(text_config=dict(TEXT, model_type="qwen3")), "text_config' model_type 'qwen3' is not supported"),
    (dict(architectures=["Kimi_K25Model"]), "is not supported"),
    (dict(vision_config=dict(VISION, num_hidden_layers=0)), "'num_hidden_layers' must be a positive integer"),
    (dict(vision_config=dict(VISION, merge_kernel_size=[2])), "'merge_kernel_size' must be two positive integers"),
    (dict(vision_config=dict(VISION, merge_kernel_size=[2, True])), "'merge_kernel_size' must be two positive"),
    (dict(projection_hidden_size=-3), "'projection_hidden_size' must be a positive integer"),
    (dict(text_config=dict(TEXT, num_key_value_heads=2)), "'num_key_value_heads' 2 is not supported"),
    (dict(text_config=dict(TEXT, scoring_func="softmax")), "'scoring_func' 'softmax' is not supported"),
])
def test_hostile_config(saved, tmp_path, changes, message):
    raw = {**json.loads((saved[1]["transformers"] / "config.json").read_text()), **changes}
    with pytest.raises(InputError, match=message):
        config_json(tmp_path, raw)


def test_quantization_config_read_in_text_config_or_at_the_top(tmp_path):
    """Kimi K2's FP8 block-wise quantization_config (tests/deepseek_configs.py) in text_config counts the weights as
    the same file with it at the top level does (as stored: FP8 with block scales, not bf16); two that differ are
    refused."""
    from deepseek_configs import FP8

    from tfcalc.count.model.quant_stored import stored_quant

    def read(name, **top):
        folder = tmp_path / name
        folder.mkdir()
        return config_json(folder, {"model_type": "kimi_k25", "text_config": {**TEXT, **top.pop("text", {})}, **top})

    inner, outer, plain = read("inner", text={"quantization_config": FP8}), read("outer", quantization_config=FP8), \
        read("plain")
    assert stored_quant(inner) == stored_quant(outer) is not None and stored_quant(plain) is None
    with pytest.raises(InputError, match="'quantization_config' differs between the top level and text_config"):
        read("both", quantization_config=FP8, text={"quantization_config": {**FP8, "weight_block_size": [64, 64]}})


def test_remote_code_head_name_reads(saved, tmp_path):
    """The checkpoints' own remote code names the class KimiK25ForConditionalGeneration: read as transformers'."""
    raw = json.loads((saved[1]["transformers"] / "config.json").read_text())
    ours = config_json(tmp_path, {**raw, "architectures": ["KimiK25ForConditionalGeneration"]})
    (tmp_path / "config.json").unlink()
    assert count_params.total(ours) == count_params.total(config_json(tmp_path, raw))
