"""The deepseek_v4 family (tfcalc.hf_config.deepseek_v4) against transformers 5.24's DeepseekV4ForCausalLM: a tiny
checkpoint with every layer kind (sliding, CSA, HCA), a hash-routed layer, hyper-connections, the router's correction
bias: parameters to the one, logits, decode over tfcalc's fixed state equal to the uncached forward and to
transformers' generate, forward FLOPs equal to FlopCounterMode on transformers' eager model at two lengths, every
checkpoint tensor mapped; at V4-Flash's size (DeepseekV4Config's defaults) on meta, parameters exact; hostile
config.json values refused in one line."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from hf_pairs import assert_decode_equals, eager_flops

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.errors import InputError
from tfcalc.model.load import load_model
from tfcalc.presets import load
from tfcalc.workload import Workload

transformers = pytest.importorskip("transformers")

TESTED_TYPES = {"deepseek_v4"}  # tests/test_hf_config.py: every supported type is tested somewhere

TYPES = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
         "compressed_sparse_attention"]
# 16 indexer heads: with few, tied (zero) index scores make the top-k torch.topk's choice (tests/test_deepseek_v4.py)
TINY = dict(vocab_size=64, hidden_size=32, moe_intermediate_size=16, num_hidden_layers=4, num_attention_heads=4,
            head_dim=16, q_lora_rank=12, partial_rotary_factor=0.5, n_routed_experts=4, num_experts_per_tok=2,
            sliding_window=8, o_groups=2, o_lora_rank=6, index_n_heads=16, index_head_dim=8, index_topk=3,
            layer_types=TYPES, max_position_embeddings=128, mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(transformers' model, tfcalc's of its checkpoint, the folder): norms, hyper-connections, sinks and position
    biases moved off their init, a random tid2eid and correction bias."""
    torch.manual_seed(0)
    hf = transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**TINY)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if any(k in name for k in ("norm", "hc", "sinks", "position_bias")):
                p.add_(torch.randn_like(p) * 0.3)
        for name, b in hf.named_buffers():
            if name.endswith("tid2eid"):
                b.copy_(torch.stack([torch.randperm(4)[:2] for _ in range(64)]))
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)
    folder = tmp_path_factory.mktemp("dsv4")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf.save_pretrained(folder)
    return hf, load_model(folder), folder


def test_tiny_parameters_exact(tiny):
    hf, model, folder = tiny
    cfg = load(str(folder / "config.json"))
    assert count_params.total(cfg) == sum(p.numel() for p in hf.parameters())
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in hf.parameters())


def test_tiny_logits_equal_transformers(tiny):
    hf, model, _ = tiny
    idx = torch.randint(0, 64, (2, 37))  # 9 CSA windows and an open one, 4 HCA windows and an open one
    with torch.no_grad():
        want, got = hf(idx, use_cache=False).logits, model(idx)
    assert (want - got).abs().max() <= 1e-4 * want.abs().max()


def test_tiny_decode_equals_the_forward_and_transformers_generate(tiny):
    """Windows close, the ring wraps and CSA's overlap is carried inside the decode steps."""
    hf, model, _ = tiny
    prompt = torch.randint(0, 64, (2, 21))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_decode_equals(model, hf, prompt, 12, model.new_cache(2, 40))


@pytest.mark.parametrize("seq", [20, 37])
def test_tiny_forward_flops_equal_flop_counter_mode(tiny, seq):
    """tfcalc's forward FLOPs = FlopCounterMode on transformers' eager model: the attention's projections and full
    square, the hyper-connections' projections and stream mix, the hash and learned routers, k experts a token,
    the shared expert, hc_head and the LM head."""
    hf, _, folder = tiny
    cfg = load(str(folder / "config.json"))
    idx = torch.randint(0, 64, (2, seq))
    assert count_flops.forward_flops(cfg, Workload(batch=2, seq=seq)) == eager_flops(hf, idx)


def test_tiny_state_is_what_the_cache_allocates(tiny):
    _, model, folder = tiny
    cfg = load(str(folder / "config.json"))
    cache = model.new_cache(1, 64)
    assert cache.nbytes == 4 * sum(cfg.architecture.state_by_dtype(64).values())


def test_tiny_checkpoint_names_map_every_tensor(tiny, cli):
    """`tfcalc params` of the saved checkpoint (DeepSeek's names, as save_pretrained writes them): every tensor maps;
    stored = parameters + the correction bias of the 3 learned routers (4 each) + the hash layer's tid2eid (64 × 2)."""
    from safetensors import safe_open

    hf, _, folder = tiny
    stored = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            stored += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    data = cli("params", str(folder), "--json").json()
    params = sum(p.numel() for p in hf.parameters())
    assert data["checkpoint_total"] == stored == params + 3 * 4 + 64 * 2 and data["analytic_total"] == params
    assert data["checkpoint"]["agree"]


# V4-Flash's layer schedule as its config.json's compress_ratios lists it (two window-only layers, then CSA and HCA
# alternating; a 44th entry for the MTP layer, which DeepseekV4Config drops), as quoted in public code (a slimmed
# copy of the file) and described by the model card (deepseek-ai/DeepSeek-V4-Flash: 284B parameters, 13B active)
FLASH_RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]


@pytest.mark.parametrize("raw", [{}, {"compress_ratios": FLASH_RATIOS}], ids=["defaults", "flash-ratios"])
def test_v4_flash_size_parameters_exact(tmp_path, raw):
    """DeepseekV4Config's defaults (its checkpoint deepseek-ai/DeepSeek-V4-Flash-Base: 43 layers, hidden 4096, 256
    experts), and with V4-Flash's compress_ratios: transformers' model on meta holds tfcalc's count (a config.json
    of the model type alone reads the defaults). The second is 284,332,230,231: the model card says 284B."""
    with torch.device("meta"):
        hf = transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**raw))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "deepseek_v4", **raw}))
    total = count_params.total(load(str(path)))
    assert total == sum(p.numel() for p in hf.parameters())
    assert "compress_ratios" not in raw or round(total / 1e9) == 284  # the model card: 284B


def _write(tmp_path, raw: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "deepseek_v4", **raw}))
    return str(path)


def test_legacy_keys_read_as_transformers_folds_them(tmp_path):
    """compress_ratios per layer, compress_rate_csa / _hca and num_hash_layers (DeepseekV4Config.__post_init__)."""
    new = load(_write(tmp_path, dict(TINY)))
    old = dict(TINY, compress_ratios=[0, 4, 128, 4], compress_rate_hca=8, num_hash_layers=1)
    for key in ("layer_types", "mlp_layer_types", "compress_rates"):
        old.pop(key)
    old_cfg = load(_write(tmp_path, old))
    assert old_cfg.layer_pattern == new.layer_pattern and old_cfg.hash_moe_layers == 1
    assert count_params.total(old_cfg) == count_params.total(new)


@pytest.mark.parametrize("changes, message", [
    (dict(num_key_value_heads=2), "'num_key_value_heads'"),
    (dict(layer_types=["full_attention"] * 4), "'layer_types'"),
    (dict(layer_types=["sliding_attention"] * 2), "lists 2 layers"),
    (dict(compress_ratios=[0, 3, 4, 4], layer_types=None), "'compress_ratios'"),
    (dict(compress_rates={"compressed_sparse_attention": 1}), "'compress_rates'"),
    (dict(compress_rates={"heavily_compressed_attention": "x"}), "'compress_rates'"),
    (dict(compress_rates=[4, 128]), "'compress_rates' must be an object"),
    (dict(mlp_layer_types=["moe", "hash_moe", "moe", "moe"]), "hash_moe layers after a moe layer"),
    (dict(mlp_layer_types=["dense"] * 4), "'mlp_layer_types'"),
    (dict(n_shared_experts=2), "'n_shared_experts'"),
    (dict(scoring_func="relu"), "'scoring_func'"),
    (dict(mlp_bias=True), "'mlp_bias'"),
    (dict(hc_mult=-1), "hyper_connections"),
    (dict(hc_mult="4"), "hc_mult"),
    (dict(o_groups=3), "o_groups"),
    (dict(index_topk=0), "index_topk"),
    (dict(sliding_window=True), "sliding_window"),
    (dict(hc_sinkhorn_iters=0), "hc_sinkhorn_iters"),
    (dict(rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                        "attention_factor": 2.0}), "'attention_factor'"),
    (dict(rope_scaling={"type": "yarn", "factor": 4.0}), "original_max_position_embeddings"),
    (dict(quantization_config={"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
                               "scale_fmt": "ue8m0", "expert_dtype": "fp4"}), "'quantization_config'"),
    (dict(quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]}), "'quantization_config'"),
])
def test_hostile_config_json(tmp_path, changes, message):
    with pytest.raises(InputError, match=message):
        assert load(_write(tmp_path, {**TINY, **changes})).architecture is None  # refused before


def test_hostile_config_json_is_one_line_on_the_command_line(tmp_path, cli):
    r = cli("params", _write(tmp_path, {**TINY, "o_groups": 3}), "--no-measure")
    assert r.code != 0 and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


def test_yarn_on_the_compressed_layers_gives_transformers_logits(tmp_path):
    """YaRN (×4 from 16) as DeepseekV4Config folds it: on the compressed layers only, attention factor 1; the file
    save_pretrained writes nests it under rope_parameters' "compress"; a published-style top-level rope_scaling
    reads the same."""
    torch.manual_seed(1)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32,
            "beta_slow": 1}
    hf = transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**TINY, rope_parameters=yarn)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf.save_pretrained(tmp_path / "ckpt")
    model = load_model(tmp_path / "ckpt")
    idx = torch.randint(0, 64, (2, 37))
    with torch.no_grad():
        want, got = hf(idx, use_cache=False).logits, model(idx)
    assert (want - got).abs().max() <= 1e-4 * want.abs().max()
    nested = load(str(tmp_path / "ckpt" / "config.json")).architecture.output.layer(1).mixer.yarn
    flat = dict(TINY, rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                    "beta_fast": 32, "beta_slow": 1})
    assert load(_write(tmp_path, flat)).architecture.output.layer(1).mixer.yarn == nested is not None
    assert model.blocks[0].spec.mixer.yarn is None or model.blocks[0].spec.mixer.compression == "none"


@pytest.mark.parametrize("overrides, message", [
    (["csa_ratio=1"], "'csa_ratio' must be at least 2"),
    (["hca_ratio=0"], "'hca_ratio'"),
    (["o_groups=3"], "o_groups"),
    (["hyper_connections=0"], "hyper_connections"),
    (["hash_moe_layers=9"], "hash_moe_layers"),
    (["compress_rope_theta=-1"], "compress_rope_theta"),
    (["sliding_window=null"], "sliding_window"),
    (["n_kv_head=2"], "n_kv_head 1"),
    (["pos_encoding=learned"], "pos_encoding rope"),
    (["csa_index_topk=x"], "csa_index_topk"),
    (["layer_pattern=swa, csa, xyz, hca"], "xyz"),
])
def test_hostile_flat_fields(tmp_path, overrides, message):
    """--set on a DeepSeek-V4 config: each bad value one InputError line."""
    with pytest.raises(InputError, match=message):
        assert load(_write(tmp_path, TINY), overrides).architecture is None  # refused before


@pytest.mark.parametrize("n, d, iters", [(4, 32, 20), (2, 16, 3)])
def test_hyper_connection_activations_against_autograd(n, d, iters):
    """tfcalc.count.model.activation_terms.hyper_bytes (fp32) = what autograd packs for one HyperConnection around a
    sub-layer that keeps nothing itself, besides its input streams (which hf_pairs.saved_bytes leaves out)."""
    from hf_pairs import saved_bytes

    from tfcalc.architecture.block import Hyper
    from tfcalc.count.model.activation_terms import hyper_bytes
    from tfcalc.model.hyper import HyperConnection

    hyper, T = Hyper(n, iters), 8
    hc = HyperConnection(hyper, d, 1e-6)
    for p in hc.parameters():
        torch.nn.init.normal_(p, std=0.3)

    class Around(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hc = hc

        def forward(self, x):
            return self.hc.around(x, lambda h: h * 2.0)  # a sub-layer that saves nothing

    got = saved_bytes(Around(), torch.randn(1, T, n, d, requires_grad=True))
    assert got == T * (hyper_bytes(hyper, d, 4) - 4 * n * d)


def test_clamped_swiglu_without_alpha_keeps_six_hidden_tensors():
    """DeepSeek-V4's clamp (swiglu_limit, no alpha): 6·f per token, against autograd on tfcalc's FFN in fp32."""
    from hf_pairs import saved_bytes

    from tfcalc.architecture import FFN
    from tfcalc.count.model.activation_terms import ffn_factor
    from tfcalc.model.ffn import FeedForward

    spec = FFN(32, 16, True, "silu", False, 10.0, None)
    ffn = FeedForward(spec)
    for p in ffn.parameters():
        torch.nn.init.normal_(p)
    saved = saved_bytes(ffn, torch.randn(1, 8, 32, requires_grad=True))
    assert saved == 8 * 4 * 16 * ffn_factor(spec) == 8 * 4 * 16 * 6


FLAT = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu", n_layer=3,
            n_head=4, n_kv_head=1, d_head=16, rope_fraction=0.5, sliding_window=4, layer_pattern="swa, csa, hca",
            attn_q_lora_rank=12, o_groups=2, o_lora_rank=6, csa_ratio=2, hca_ratio=4, csa_index_topk=2,
            csa_index_heads=32, csa_index_head_dim=8, attn_bias=False, ffn_bias=False, n_expert=4, n_expert_active=2,
            shared_expert_d_ff=64, router_scoring="sqrtsoftplus", router_score_bias=True, hash_moe_layers=2,
            swiglu_limit=10.0, hyper_connections=2)


@pytest.mark.parametrize("batch, seq", [(1, 8), (2, 5), (1, 3)])
def test_whole_model_activations_against_autograd(batch, seq):
    """tfcalc.count.model.activations of a DeepSeek-V4 stack (every layer kind, hash and learned routers with
    sqrt-softplus scores, the clamped SwiGLU, hyper-connections and hc_head) against autograd's saved tensors of
    tfcalc's model in fp32: exact but for the compressed layers' per-sequence terms, rounded up to a byte a token
    (less than batch·seq bytes a compressed layer)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "count"))
    from conftest import tiny
    from test_activation_kinds import _saved

    from tfcalc.count.model.activations import activations

    cfg = tiny(**FLAT)
    counted = activations(cfg, Workload(batch=batch, seq=seq, dtype="fp32")).stored
    assert 0 <= counted - _saved(cfg, batch, seq, None) < 2 * batch * seq


def test_rows_joining_and_leaving_decode_as_alone():
    """Continuous batching (tfcalc.model.slots): two prompts admitted into two rows of one state, decoded together,
    one row released and the other moved into it: each row's tokens are its own sequence's uncached greedy ones."""
    from conftest import tiny
    from hf_pairs import assert_rows_decode_alone

    from tfcalc.model import build_model

    torch.manual_seed(0)
    model = build_model(tiny(**dict(FLAT, max_seq_len=32)), "cpu", torch.float32).eval()
    assert_rows_decode_alone(model, [torch.randint(0, 61, (1, 5)), torch.randint(0, 61, (1, 9))], 24)


def test_memory_names_the_compressed_state(tmp_path, cli):
    """`tfcalc memory` of V4-Flash's layout at 4,096 tokens, bf16: the growing state by hand (21 CSA layers: 1,024
    entries of 512 and 1,024 index keys of 128; 20 HCA layers: 32 entries; every layer a 128-slot window of 512; 2
    bytes each), the fixed buffers beside it, and the row saying what grows."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "deepseek_v4", "compress_ratios": FLASH_RATIOS}))
    r = cli("memory", str(path), "--seq", "4096", "--json")
    growing = 2 * (21 * 1024 * (512 + 128) + 20 * 32 * 512 + 43 * 128 * 512)
    fixed = 2 * (21 * (2 * 4 * 1024 + 2 * 4 * 512 + 2 * 4 * 256 + 2 * 4 * 128) + 20 * 2 * 128 * 512)
    assert r.json()["kv_cache_bytes"] == growing + fixed
    text = " ".join(cli("memory", str(path), "--seq", "4096").out.split())  # the table's wrapped cells joined
    assert "a compressed entry (and index key) per 4 or 128 tokens" in text
