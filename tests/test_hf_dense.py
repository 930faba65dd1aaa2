"""Issue 22's dense types (phi, starcoder2, cohere, granite, gpt_bigcode, bloom, roberta, OPT-350m's projected
embedding, BERT's BertModel as a decoder with cross-attention), beyond what tests/test_hf_models.py holds
for every type (parameters, forward FLOPs and loaded logits against transformers):

- the published totals, each derived by hand below from its config.json (tests/hub_dense.py);
- KV bytes: tfcalc's count equals the cache transformers allocates for the same prompt;
- decoding: the loaded checkpoint, prefilled and then decoded one token at a time through tfcalc's static
  KV cache, gives transformers' full-forward logits at every position (within 1e-4 of the largest);
- ``params FOLDER``: checkpoint_total equals the elements stored in the safetensors files;
- hostile values of the new fields and keys: one line, exit 2.
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import assert_one_line_error
from hf_tiny import CASES, T, inputs
from hub_dense import BLOOM_560M, COMMAND_R, GRANITE_3_1_8B, OPT_350M, PHI_2, ROBERTA_BASE, STARCODER, STARCODER2_15B

from tfcalc.count.model import memory, params as count
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")
NEW = ["phi", "starcoder2", "cohere", "granite", "gpt_bigcode", "gpt_bigcode-mha", "bloom", "roberta", "roberta-mlm",
       "opt-350m-like", "bert-decoder-base", "bert-causal"]
DECODERS = [n for n in NEW if CASES[n].model.endswith("ForCausalLM")] + ["bert-causal"]  # BertLMHeadModel, is_decoder


def _write(tmp_path, data) -> str:
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))
    return str(path)


# Hand derivations (d = hidden, L = layers, V = vocabulary, f = FFN width, kv = K/V width):
# - phi-2: tokens 51200·2560 = 131,072,000; per layer the shared LayerNorm 5,120, Q/K/V/dense 4·(2560² + 2560)
#   = 26,224,640, fc1 2560·10240 + 10240 = 26,224,640, fc2 10240·2560 + 2560 = 26,216,960: 78,671,360 × 32
#   = 2,517,483,520; final LayerNorm 5,120; LM head with bias 131,072,000 + 51,200. Total 2,779,683,840.
# - starcoder2-15b: tokens 49152·6144 = 301,989,888 (and an untied head as many); per layer Q and O
#   6144² + 6144 each, K and V 6144·512 + 512 each (4 K/V heads of 128) = 81,802,240, c_fc and c_proj
#   151,019,520 + 151,001,088, two LayerNorms 24,576: 383,847,424 × 40 = 15,353,896,960; final 12,288.
#   Total 15,957,889,024 (the Hub's "16B").
# - c4ai-command-r-v01: tokens 256000·8192 = 2,097,152,000 (tied); per layer Q/K/V/O 4·8192² = 268,435,456,
#   gated FFN 3·8192·22528 = 553,648,128, one bias-free LayerNorm 8,192: 822,091,776 × 40; final 8,192.
#   Total 34,980,831,232.
# - granite-3.1-8b: tokens 49155·4096 = 201,338,880 (tied); per layer Q and O 4096² each, K and V 4096·1024
#   each = 41,943,040, FFN 3·4096·12800 = 157,286,400, norms 8,192: 199,237,632 × 40; final 4,096.
#   Total 8,170,848,256.
# - starcoder: wte 49152·6144 = 301,989,888 (tied), wpe 8192·6144 = 50,331,648; per layer c_attn
#   6144·(6144 + 2·128) + 6400 = 39,328,000 (one K/V head), c_proj 37,754,880, FFN 151,019,520 +
#   151,001,088, LayerNorms 24,576: 379,128,064 × 40; ln_f 12,288. Total 15,517,456,384.
# - bloom-560m: tokens 250880·1024 = 256,901,120, embedding LayerNorm 2,048; per layer QKV 1024·3072 +
#   3072, dense 1024² + 1024, FFN 1024·4096 + 4096 and 4096·1024 + 1024, LayerNorms 4,096: 12,596,224 × 24;
#   ln_f 2,048. Total 559,214,592.
# - roberta-base (RobertaForMaskedLM): tokens 50265·768, positions 514·768, one token type 768, LayerNorm
#   1,536 = 39,000,576; per layer 7,087,872 (as BERT-base) × 12 = 85,054,464; the LM head's dense 590,592,
#   LayerNorm 1,536 and bias 50,265. Total 124,697,433 (RobertaModel, with its pooler instead: 124,645,632).
# - opt-350m: tokens 50272·512 = 25,739,264, positions 2050·1024 = 2,099,200, project_in and project_out
#   512·1024 each; per layer 12,596,224 × 24 (post-LN: no final norm). Total 331,196,416.
PUBLISHED = [(PHI_2, 2_779_683_840), (STARCODER2_15B, 15_957_889_024), (COMMAND_R, 34_980_831_232),
             (GRANITE_3_1_8B, 8_170_848_256), (STARCODER, 15_517_456_384), (BLOOM_560M, 559_214_592),
             (ROBERTA_BASE, 124_697_433), ({**ROBERTA_BASE, "architectures": ["RobertaModel"]}, 124_645_632),
             (OPT_350M, 331_196_416)]


@pytest.mark.parametrize("data, total", PUBLISHED, ids=["phi-2", "starcoder2-15b", "command-r", "granite-3.1-8b",
                                                        "starcoder", "bloom-560m", "roberta-base", "roberta-base-model",
                                                        "opt-350m"])
def test_published_totals(tmp_path, data, total):
    assert count.total(load(_write(tmp_path, data))) == total


def test_opt_350m_projections_are_in_the_breakdown(tmp_path):
    breakdown = count.breakdown(load(_write(tmp_path, OPT_350M)))
    assert breakdown["token_embedding"] == 50272 * 512 and breakdown["position_embedding"] == 2050 * 1024
    assert breakdown["embedding_project_in"] == breakdown["lm_head_project_out"] == 512 * 1024
    assert breakdown["lm_head"] == 0  # the tied token table, counted there


def _cache_bytes(cache) -> int:
    """Bytes of the K and V tensors a transformers cache holds (DynamicCache: one layer object per layer)."""
    layers = cache.layers if hasattr(cache, "layers") else cache.self_attention_cache.layers
    return sum(t.numel() * t.element_size() for layer in layers for t in (layer.keys, layer.values))


@pytest.mark.parametrize("name", DECODERS)
def test_kv_bytes_equal_the_cache_transformers_allocates(saved, name):
    """fp32, a prompt of 3 tokens (under every tiny window, so the convention for windows -- W or W - 1 kept
    -- does not enter) and of T (past starcoder2's window of 4: the window's own rule, below)."""
    import torch

    model, folder = saved(name)
    cfg = load(str(folder / "config.json"))
    for seq in (3, T):
        with torch.no_grad():
            out = model(**inputs(name, seq=seq), use_cache=True)
        got = _cache_bytes(out.past_key_values)
        expected = memory.kv_cache_bytes(cfg, Workload(batch=2, seq=seq, dtype="fp32"))
        if seq > (cfg.sliding_window or seq):  # transformers keeps W - 1 past positions, tfcalc W (issue 22)
            expected_hf = memory.kv_cache_bytes(cfg, Workload(batch=2, seq=cfg.sliding_window - 1, dtype="fp32"))
            assert got in (expected, expected_hf)
        else:
            assert got == expected


@pytest.mark.parametrize("name", DECODERS)
def test_decoding_the_checkpoint_gives_transformers_logits(saved, name):
    import torch

    import tfcalc

    model, folder = saved(name)
    ours = tfcalc.load_model(str(folder))
    ids = inputs(name, seed=3)["input_ids"]
    prompt = 4
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        cache = ours.new_cache(ids.shape[0], ids.shape[1])
        steps = [ours.prefill(ids[:, :prompt], cache, last_only=False)]
        steps += [ours.decode(ids[:, i:i + 1], cache) for i in range(prompt, ids.shape[1])]
    got = torch.cat(steps, dim=1)
    assert got.shape == expected.shape
    assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()


@pytest.mark.parametrize("name", NEW)
def test_params_of_the_folder_count_the_files(saved, cli, name):
    from safetensors import safe_open

    _, folder = saved(name)
    stored = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            stored += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    r = cli("params", str(folder), "--json")
    assert r.code == 0, r.err
    data = r.json()
    assert data["checkpoint_total"] == stored == data["analytic_total"] == data["empirical_total"]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({**GRANITE_3_1_8B, "logits_scaling": 0}, "'logits_scaling' must be positive"),
        ({**GRANITE_3_1_8B, "residual_multiplier": "big"}, "'residual_multiplier' must be a number"),
        ({**COMMAND_R, "use_qk_norm": "yes"}, "'use_qk_norm' must be true or false"),
        ({**COMMAND_R, "logit_scale": [1]}, "'logit_scale' must be a number"),
        ({**BLOOM_560M, "apply_residual_connection_post_layernorm": True}, "residual would start after the norm"),
        ({**STARCODER, "add_cross_attention": True}, "'add_cross_attention': True is not supported"),
        ({**ROBERTA_BASE, "pad_token_id": 600}, "'pad_token_id' 600 must be at least 0 and below"),
        ({**ROBERTA_BASE, "pad_token_id": -1}, "'pad_token_id' -1 must be at least 0"),
        ({**OPT_350M, "word_embed_proj_dim": 0}, "'word_embed_proj_dim' must be positive; got 0"),
        ({**OPT_350M, "word_embed_proj_dim": 2.5}, "'word_embed_proj_dim' must be an integer; got 2.5"),
        ({**PHI_2, "partial_rotary_factor": 0.0125}, "rope rotates pairs"),  # int(80 · 0.0125) = 1 channel
        ({**STARCODER2_15B, "use_bias": 1}, "'use_bias' must be true or false"),
    ],
)
def test_hostile_config_json_is_one_line(tmp_path, cli, changes, message):
    r = cli("params", _write(tmp_path, changes))
    assert_one_line_error(r, message)


@pytest.mark.parametrize(
    "sets, message",
    [
        (["qk_norm_per_head=true"], "qk_norm_per_head gives each head its own Q/K norm weights: set qk_norm true"),
        (["logit_scale=-1"], "field 'logit_scale' must be positive"),
        (["embedding_multiplier=0"], "field 'embedding_multiplier' must be positive"),
        (["residual_multiplier=nan"], "field 'residual_multiplier' must be a number"),
        (["embedding_dim=0"], "field 'embedding_dim' must be positive"),
        (["embedding_dim=2199023255553"], "field 'embedding_dim' must be at most"),
        (["lm_head=false", "tie_embeddings=false", "logit_scale=2"], "logit_scale needs an LM head"),
        (["arch=encoder", "embedding_dim=64"], "embedding_dim (64) other than d_model (768)"),
    ],
)
def test_hostile_new_fields_are_one_line(cli, sets, message):
    args = [a for s in sets for a in ("--set", s)]
    assert_one_line_error(cli("params", "gpt2", *args), message)
