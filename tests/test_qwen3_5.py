"""Qwen3.5 (model types qwen3_5_text, qwen3_5_moe_text, and the vision-language qwen3_5, qwen3_5_moe) against
transformers 5.24 (modeling_qwen3_5.py, modeling_qwen3_5_moe.py): Qwen3-Next's hybrid with the gated DeltaNet's
projections as four tensors (tfcalc.architecture.gated_deltanet, split_projections). At full size on meta with
transformers' default configs (its docstrings: "Qwen3.5-9B style", Qwen/Qwen3.5-35B-A3B): parameters exact, the
vision tower counted apart; tiny vision-language checkpoints loaded by load_model give transformers' logits; the
text-only tiny models are in tests/hf_tiny.py (tests/test_hf_models.py runs them)."""

from __future__ import annotations

import json

import pytest
import torch
from hf_pairs import greedy_uncached

from tfcalc.count.model import params as count_params
from tfcalc.errors import InputError
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")

TEXT = dict(vocab_size=61, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
            linear_value_head_dim=12, max_position_embeddings=256)
VISION = dict(depth=2, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=32,
              num_position_embeddings=16, patch_size=4)
KINDS = {"qwen3_5": ("Qwen3_5Config", "Qwen3_5ForConditionalGeneration", dict(intermediate_size=48)),
         "qwen3_5_moe": ("Qwen3_5MoeConfig", "Qwen3_5MoeForConditionalGeneration",
                         dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=20,
                              shared_expert_intermediate_size=24))}


def _config_json(model) -> dict:
    return json.loads(model.config.to_json_string())


@pytest.mark.parametrize("kind", list(KINDS))
def test_full_size_defaults_on_meta(tmp_path, kind):
    """transformers' default configs at full size, built on meta: the language model's parameters are tfcalc's
    count, the vision tower's its vision_params."""
    import transformers

    config_class, model_class, _ = KINDS[kind]
    with torch.device("meta"):
        model = getattr(transformers, model_class)(getattr(transformers, config_class)())
    (tmp_path / "config.json").write_text(json.dumps(_config_json(model)))
    cfg = load(str(tmp_path / "config.json"))
    language = sum(p.numel() for p in model.model.language_model.parameters()) + model.lm_head.weight.numel()
    assert count_params.total(cfg) == language
    assert cfg.vision_params == sum(p.numel() for p in model.model.visual.parameters())
    linear = [b.mixer for b, _ in cfg.architecture.output.kinds() if hasattr(b.mixer, "split_projections")]
    assert linear and all(m.split_projections for m in linear)


@pytest.fixture(scope="module")
def saved_vl(tmp_path_factory):
    import transformers

    made = {}

    def get(kind: str):
        if kind not in made:
            config_class, model_class, extra = KINDS[kind]
            torch.manual_seed(0)
            config = getattr(transformers, config_class)(text_config=dict(TEXT, **extra), vision_config=VISION)
            config._attn_implementation = "eager"
            config.text_config._experts_implementation = "eager"
            model = getattr(transformers, model_class)(config).eval()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p), alpha=0.05)
            folder = tmp_path_factory.mktemp(kind)
            model.save_pretrained(folder)
            made[kind] = model, folder
        return made[kind]

    return get


@pytest.mark.parametrize("kind", list(KINDS))
def test_vision_language_checkpoint_logits(saved_vl, kind):
    """The language model of a saved <Qwen3.5>ForConditionalGeneration, loaded by load_model (its vision tower
    left out), gives transformers' logits on text over two chunks, and decodes with its fixed state as its
    uncached forward does."""
    import tfcalc
    from tfcalc.model import generate

    model, folder = saved_vl(kind)
    ours = tfcalc.load_model(str(folder))
    ids = torch.randint(0, 61, (2, 70), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref, got = model(input_ids=ids).logits, ours(ids)
    assert (got - ref).abs().max() <= 1e-4 and ref.abs().max() > 0.1
    prompt = ids[:, :62]
    assert torch.equal(generate(ours, prompt, 5), greedy_uncached(ours, prompt, 5))


@pytest.mark.parametrize("changes, message", [
    (dict(text_config=[1]), "'text_config' must be an object"),
    (dict(vision_config="x"), "'vision_config' must be an object"),
    (dict(architectures=["Qwen3_5ForCausalLM"]), "is not supported"),
    (dict(vision_config=dict(VISION, depth=0)), "'depth' must be a positive integer"),
])
def test_hostile_vision_language_config(saved_vl, tmp_path, changes, message):
    _, folder = saved_vl("qwen3_5")
    raw = {**json.loads((folder / "config.json").read_text()), **changes}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match=message):
        load(str(tmp_path / "config.json"))


def test_split_projections_need_the_linear_mixer():
    with pytest.raises(InputError, match="give linear_mixer too"):
        load("llama2-7b", ["linear_split_projections=true"])
