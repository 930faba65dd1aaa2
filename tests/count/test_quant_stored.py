"""Weights as a quantized checkpoint stores them (config.json's quantization_config; tfcalc.hf_config.quantization,
tfcalc.count.model.quant_stored): DeepSeek-V3's FP8 against transformers' FP8 modules on meta and the published
safetensors total, Kimi-K2-Thinking's int4 by hand and against its published size, AWQ/GPTQ by hand, the commands
that print them, and each hostile quantization_config refused in one line naming the field."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error
from deepseek_configs import DEEPSEEK_V3, KIMI_K2

from tfcalc.config import ConfigError
from tfcalc.count.model import params as count, quant
from tfcalc.presets import load

BF16 = quant.plain("bf16")
# moonshotai/Kimi-K2-Thinking/config.json's quantization_config (compressed-tensors, int4 pack-quantized, group 32,
# symmetric; only the routed experts quantized)
KIMI_THINKING_QUANT = {
    "config_groups": {"group_0": {
        "input_activations": None, "output_activations": None, "targets": ["Linear"],
        "weights": {"actorder": None, "block_structure": None, "dynamic": False, "group_size": 32, "num_bits": 4,
                    "observer": "minmax", "observer_kwargs": {}, "strategy": "group", "symmetric": True,
                    "type": "int"}}},
    "format": "pack-quantized", "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                                           "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    "kv_cache_scheme": None, "quant_method": "compressed-tensors", "quantization_status": "compressed"}
# meta-llama/Meta-Llama-3-8B/config.json (the keys that shape the count)
LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-05,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
KIMI_K2_THINKING = {**KIMI_K2, "max_position_embeddings": 262144, "quantization_config": KIMI_THINKING_QUANT}


def _write(tmp_path, raw: dict, folder: str = "m") -> str:
    (tmp_path / folder).mkdir(exist_ok=True)
    path = tmp_path / folder / "config.json"
    path.write_text(json.dumps(raw))
    return str(path)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _deepseek_mla() -> list[tuple[int, int]]:
    """DeepSeek-V3's MLA matrices (out, in): q_a, q_b, kv_a (512 latent + 64 rope rows), kv_b, o."""
    return [(1536, 7168), (24576, 1536), (576, 7168), (32768, 512), (7168, 16384)]


def _expert(f: int = 2048, d: int = 7168) -> list[tuple[int, int]]:
    return [(f, d), (f, d), (d, f)]


def test_deepseek_v3_fp8_blocks_by_hand(tmp_path):
    cfg = load(_write(tmp_path, DEEPSEEK_V3))
    assert (cfg.stored_quant, cfg.stored_quant_scales, cfg.stored_quant_block) == ("fp8", "block", (128, 128))
    mats = 61 * _deepseek_mla() + 3 * _expert(18432) + 58 * 257 * _expert()
    fp8 = sum(r * c for r, c in mats)
    scales = sum(_cdiv(r, 128) * _cdiv(c, 128) for r, c in mats)
    rest = count.total(cfg) - fp8  # embedding, head, norms, routers: bf16
    assert rest == 2 * 129280 * 7168 + 58 * 256 * 7168 + 61 * (2 * 7168 + 1536 + 512) + 7168
    parts = quant.breakdown(cfg, BF16)
    assert parts == {"quantized": fp8, "scales": 4 * scales, "zero_points": 0, "unquantized": 2 * rest}
    assert quant.weights_bytes(cfg, BF16) == 673_150_552_416 == fp8 + 4 * scales + 2 * rest
    assert quant.weights_bytes(cfg, BF16) < 0.51 * 2 * count.total(cfg)  # not the 1.34 TB of bf16
    assert quant.format_label(cfg, BF16) == "fp8 as stored (128×128 blocks, fp32 scales; rest bf16)"
    # a quantized --dtype is a what-if of its own: the checkpoint's format does not apply
    assert quant.weights_bytes(cfg, quant.weight_format("int8")) == quant.weights_bytes(
        load(_write(tmp_path, {k: v for k, v in DEEPSEEK_V3.items() if k != "quantization_config"}, "p")),
        quant.weight_format("int8"))


def test_deepseek_v3_matches_the_published_safetensors_total(tmp_path):
    """deepseek-ai/DeepSeek-V3, model.safetensors.index.json: metadata.total_size 688,586,727,753 bytes. The
    files hold the model and its MTP module (layer 61: one more MLA + MoE layer in fp8 with its scales, and in
    bf16 eh_proj (7168×14336), its norms and its own copies of the embedding and head), and each MoE layer's
    fp32 e_score_correction_bias (a buffer). Within 0.01% (12 MB of 689 GB that this derivation does not place)."""
    cfg = load(_write(tmp_path, DEEPSEEK_V3))
    mtp_mats = _deepseek_mla() + 257 * _expert()
    mtp = (sum(r * c for r, c in mtp_mats) + 4 * sum(_cdiv(r, 128) * _cdiv(c, 128) for r, c in mtp_mats)
           + 2 * (2 * 129280 * 7168 + 7168 * 14336 + 256 * 7168 + 5 * 7168 + 1536 + 512) + 4 * 256)
    files = quant.weights_bytes(cfg, BF16) + 4 * 256 * 58 + mtp
    assert files == pytest.approx(688_586_727_753, rel=1e-4)


def test_deepseek_v3_fp8_matches_transformers_fp8_modules_on_meta(tmp_path):
    """transformers' own FP8 modules (integrations/finegrained_fp8.py, replace_with_fp8_linear, as its
    FineGrainedFP8 quantizer calls it, the LM head kept) on DeepseekV3ForCausalLM at full size on meta: the fp8
    weights and fp32 weight_scale_inv byte for byte; transformers keeps the router in fp32 in memory (the
    checkpoint stores it in bf16: tfcalc counts it so)."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM, FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    path = _write(tmp_path, DEEPSEEK_V3)
    hf = AutoConfig.from_pretrained(str(tmp_path / "m"))
    hf.quantization_config = None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)
    model = replace_with_fp8_linear(model, modules_to_not_convert=["lm_head"],
                                    quantization_config=FineGrainedFP8Config(weight_block_size=[128, 128]))
    by: dict[str, int] = {}
    for p in model.parameters():
        by[str(p.dtype)] = by.get(str(p.dtype), 0) + p.numel() * p.element_size()
    router = 58 * 256 * 7168
    parts = quant.breakdown(load(path), BF16)
    assert by["torch.float8_e4m3fn"] == parts["quantized"]
    assert by["torch.float32"] == parts["scales"] + 4 * router
    assert by["torch.bfloat16"] + 2 * router == parts["unquantized"]


def test_kimi_k2_thinking_int4_experts_by_hand_and_published_size(tmp_path):
    """Only the routed experts are int4 (the ignore list keeps attention, the shared experts, the dense FFN of
    layer 0 and the head): 60 × 384 × 3 matrices of 2048×7168, 4 bits each, one bf16 scale per 32. Moonshot's
    Hugging Face page gives the checkpoint as 594 GB; within 0.1%."""
    cfg = load(_write(tmp_path, KIMI_K2_THINKING))
    assert (cfg.stored_quant, cfg.stored_quant_group, cfg.stored_quant_zero_point) == ("int4", 32, False)
    keep = cfg.stored_quant_keep.split(",")
    assert "expert_ffn_up_weight" not in keep
    assert {"attn_kv_b_weight", "shared_expert_ffn_up_weight", "ffn_up_weight", "lm_head"} <= set(keep)
    experts = 60 * 384 * 3 * 2048 * 7168
    rest = count.total(cfg) - experts
    parts = quant.breakdown(cfg, BF16)
    assert parts == {"quantized": experts // 2, "scales": 2 * experts // 32, "zero_points": 0, "unquantized": 2 * rest}
    total = quant.weights_bytes(cfg, BF16)
    assert total == 594_205_259_776 and total == pytest.approx(594e9, rel=1e-3)
    assert total < 0.3 * 2 * count.total(cfg)  # not the 2.05 TB of bf16


@pytest.mark.parametrize("method, extra, zeros", [
    ("awq", {"zero_point": True, "version": "gemm"}, True),
    ("gptq", {"desc_act": False, "sym": True}, True),  # GPTQ stores qzeros even when symmetric
    ("awq", {"zero_point": False}, False),
])
def test_awq_gptq_int4_group_128_by_hand(tmp_path, method, extra, zeros):
    """Llama-3-8B-shaped: every block matrix int4 with an fp16 scale (and a packed int4 zero point) per 128 inputs;
    embedding, norms and the head in bf16."""
    raw = {**LLAMA3_8B, "quantization_config": {"quant_method": method, "bits": 4, "group_size": 128, **extra}}
    cfg = load(_write(tmp_path, raw))
    d, f, kv, layers = cfg.d_model, cfg.ffn_dim, cfg.kv_dim, cfg.n_layer
    mats = layers * [(d, d), (kv, d), (kv, d), (d, d), (f, d), (f, d), (d, f)]
    n = sum(r * c for r, c in mats)
    groups = sum(r * c // 128 for r, c in mats)
    rest = count.total(cfg) - n
    assert quant.breakdown(cfg, BF16) == {"quantized": n // 2, "scales": 2 * groups,
                                          "zero_points": groups // 2 if zeros else 0, "unquantized": 2 * rest}


def test_commands_print_the_stored_figure_and_say_so(tmp_path, cli):
    path = _write(tmp_path, KIMI_K2_THINKING)
    memory = cli("memory", path, "--json").json()
    assert memory["weights_bytes"] == 594_205_259_776
    assert memory["weight_format"]["label"] == "int4 as stored (group 32, bf16 scales; rest bf16)"
    text = cli("memory", path).out
    assert "int4 as stored" in text and "block matrices in int4, as stored" in text
    assert "memory in bf16 (weights int4 as stored)" in text
    infer = cli("infer", path, "--seq", "1024", "--gen", "8", "--json").json()
    assert "int4 as stored" in json.dumps(infer)
    params = cli("params", path, "--json").json()
    assert params["weights_bytes"]["stored"] == 594_205_259_776
    text = cli("params", path).out
    assert "553.4 GiB as the checkpoint stores them, int4 as stored" in text and "in bf16 (" not in text


HOSTILE = [
    ({"quant_method": "bitsandbytes"}, "quant_method 'bitsandbytes' is not counted"),
    ({"quant_method": None}, "quant_method None is not counted"),
    ("fp8", "'quantization_config' must be an object"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size must be two sizes"),
    ({"quant_method": "fp8", "weight_block_size": [0, 128]}, "weight_block_size must be a whole number"),
    ({"quant_method": "fp8", "weight_block_size": [128.5, 128]}, "weight_block_size must be a whole number"),
    ({"quant_method": "fp8", "weight_block_size": [10**30, 128]}, "weight_block_size must be a whole number"),
    ({"quant_method": "fp8", "weight_block_size": "128x128"}, "weight_block_size must be two sizes"),
    ({"quant_method": "fp8", "fmt": "e3m4"}, "fmt 'e3m4' is not an fp8 format"),
    ({"quant_method": "fp8", "activation_scheme": "lazy"}, "activation_scheme 'lazy'"),
    ({"quant_method": "fp8", "modules_to_not_convert": "lm_head"}, "modules_to_not_convert must be a list"),
    ({"quant_method": "fp8", "modules_to_not_convert": ["(unclosed"]}, "'(unclosed', which is not a valid pattern"),
    ({"quant_method": "fp8", "modules_to_not_convert": ["model.layers.0.mlp"]},
     "keeps ffn_gate (mlp.gate_proj) in 1 of the 3 layers that have it"),
    ({"quant_method": "awq", "bits": 3}, "bits 3 is not counted"),
    ({"quant_method": "gptq", "bits": 4.5}, "bits must be int; got 4.5"),
    ({"quant_method": "gptq", "bits": True}, "bits must be int; got True"),
    ({"quant_method": "awq", "group_size": 100}, "'stored_quant_group' (100) does not divide the input width"),
    ({"quant_method": "awq", "group_size": 0}, "group_size must be a whole number"),
    ({"quant_method": "awq", "group_size": "128"}, "group_size must be int"),
    ({"quant_method": "awq", "zero_point": "yes"}, "zero_point must be bool"),
    ({**KIMI_THINKING_QUANT, "config_groups": {}}, "config_groups must hold one scheme"),
    ({**KIMI_THINKING_QUANT, "quantization_status": "frozen"}, "quantization_status 'frozen'"),
    ({**KIMI_THINKING_QUANT, "sparsity_config": {"format": "sparse-24"}}, "sparsity_config is not counted"),
    ({**KIMI_THINKING_QUANT, "format": "marlin-24"}, "format 'marlin-24' is not counted for int4"),
    ({**KIMI_THINKING_QUANT, "ignore": "lm_head"}, "ignore must be a list of module names"),
]


def _scheme(**weights) -> dict:
    group = KIMI_THINKING_QUANT["config_groups"]["group_0"]
    return {**KIMI_THINKING_QUANT, "config_groups": {"group_0": {**group, "weights": {**group["weights"], **weights}}}}


HOSTILE += [
    (_scheme(num_bits=2), "num_bits 2 of type 'int' is not counted"),
    (_scheme(num_bits=4, type="float"), "num_bits 4 of type 'float' is not counted"),
    (_scheme(num_bits=4.0), "num_bits must be int; got 4.0"),
    (_scheme(strategy="tensor_group"), "strategy 'tensor_group' is not counted"),
    (_scheme(group_size=None), "group_size must be a whole number"),
    (_scheme(group_size=48), "'stored_quant_group' (48) does not divide the input width"),
    (_scheme(scale_dtype="float8"), "scale_dtype 'float8' is not one of"),
    (_scheme(symmetric="no"), "symmetric must be bool"),
    (_scheme(strategy="block", block_structure=[128]), "block_structure must be two sizes"),
]


@pytest.mark.parametrize("quantization, message", HOSTILE)
def test_hostile_quantization_config_is_one_line_naming_the_field(tmp_path, quantization, message):
    with pytest.raises(ConfigError) as e:
        load(_write(tmp_path, {**DEEPSEEK_V3, "quantization_config": quantization}))
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_hostile_cli_is_one_line_and_exit_2(tmp_path, cli):
    path = _write(tmp_path, {**DEEPSEEK_V3, "quantization_config": {"quant_method": "hqq"}})
    assert_one_line_error(cli("memory", path), "quant_method 'hqq' is not counted")


@pytest.mark.parametrize("overrides, message", [
    (["stored_quant_group=128"], "field 'stored_quant_group' describes quantized weights: give stored_quant too"),
    (["stored_quant=int4"], "stored_quant needs stored_quant_scales"),
    (["stored_quant=int4", "stored_quant_scales=group", "stored_quant_scale_dtype=fp16"],
     "'stored_quant_group' goes with stored_quant_scales group"),
    (["stored_quant=fp8", "stored_quant_scales=block", "stored_quant_block=[128,128,1]",
      "stored_quant_scale_dtype=fp32"], "'stored_quant_block' must be two sizes"),
    (["stored_quant=fp8", "stored_quant_scales=channel", "stored_quant_scale_dtype=fp32",
      "stored_quant_zero_point=true"], "fp8 weights are symmetric"),
    (["stored_quant=int8", "stored_quant_scales=channel", "stored_quant_scale_dtype=fp32",
      "stored_quant_keep=lm_head,router_weight"], "'stored_quant_keep' names 'router_weight'"),
    (["stored_quant=int3"], "must be one of fp8, int8, int4 or null"),
])
def test_hostile_set_fields(overrides, message):
    with pytest.raises(ConfigError) as e:
        load("llama3-8b", overrides)
    assert message in str(e.value), str(e.value)


def test_set_fields_count_like_the_config_json():
    """The fields by --set: Llama 3 8B int8 per channel, fp32 scales, head kept: by hand."""
    cfg = load("llama3-8b", ["stored_quant=int8", "stored_quant_scales=channel", "stored_quant_scale_dtype=fp32",
                             "stored_quant_keep=lm_head"])
    rows = 32 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096)
    n = 32 * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096)
    assert quant.breakdown(cfg, BF16) == {"quantized": n, "scales": 4 * rows, "zero_points": 0,
                                          "unquantized": 2 * (count.total(cfg) - n)}


def test_a_tiny_fp8_checkpoint_on_disk_holds_the_bytes_counted(tmp_path, cli):
    """A DeepSeek-V3-shaped FP8 checkpoint written from transformers' own FP8 modules (replace_with_fp8_linear:
    fp8 weights and fp32 weight_scale_inv per 128×128 tile; widths multiples of 128 but the 192-row kv_a, so
    transformers' fused expert gate_up tiles as the published per-expert matrices do), the rest in bf16 as the
    published files store it: the bytes of its tensors (safetensors headers) are tfcalc's count as stored plus
    the fp32 router correction bias (a buffer, no parameter); `tfcalc params FOLDER` reads the same bytes."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    fp8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
    kw = dict(vocab_size=512, hidden_size=256, intermediate_size=384, moe_intermediate_size=256, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4,
              num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, kv_lora_rank=128,
              q_lora_rank=128, qk_rope_head_dim=64, v_head_dim=64, qk_nope_head_dim=64, max_position_embeddings=64)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**kw))
    model = replace_with_fp8_linear(model, modules_to_not_convert=["lm_head"],
                                    quantization_config=FineGrainedFP8Config(weight_block_size=[128, 128]))
    tensors = {}
    for k, v in model.state_dict().items():  # the FP8 modules come on meta: storage of their shape and dtype
        v = torch.zeros(v.shape, dtype=v.dtype) if v.is_meta else v
        plain = v.dtype != torch.float8_e4m3fn and not k.endswith(("scale_inv", "e_score_correction_bias"))
        tensors[k] = (v.to(torch.bfloat16) if plain else v).contiguous()
    folder = tmp_path / "tiny-fp8"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    raw = {**DeepseekV3Config(**kw).to_dict(), "architectures": ["DeepseekV3ForCausalLM"], "quantization_config": fp8}
    (folder / "config.json").write_text(json.dumps(raw))
    on_disk = sum(v.numel() * v.element_size() for v in tensors.values())
    cfg = load(str(folder / "config.json"))
    bias = 4 * kw["n_routed_experts"] * (kw["num_hidden_layers"] - kw["first_k_dense_replace"])
    assert quant.weights_bytes(cfg, BF16) + bias == on_disk
    data = cli("params", str(folder), "--json", "--no-measure").json()
    assert data["checkpoint"]["bytes"] == on_disk and data["weights_bytes"]["stored"] + bias == on_disk


def _stored_fields(cfg) -> dict:
    return {f: getattr(cfg, f) for f in ("stored_quant", "stored_quant_scales", "stored_quant_group",
                                         "stored_quant_block", "stored_quant_scale_dtype", "stored_quant_zero_point",
                                         "stored_quant_keep")}


@pytest.mark.parametrize("preset, raw", [("deepseek-v3", DEEPSEEK_V3), ("kimi-k2", KIMI_K2)])
def test_the_presets_store_what_their_checkpoints_store(tmp_path, preset, raw):
    """deepseek-v3 and kimi-k2 carry the quantization_config their published config.json states (fp8 e4m3,
    128×128 blocks, fp32 scales, the head kept), so every command counts their weights as stored."""
    assert _stored_fields(load(preset)) == _stored_fields(load(_write(tmp_path, raw)))
    assert load(preset).stored_quant == "fp8"


def test_memory_of_the_deepseek_v3_preset_is_the_stored_figure_by_hand(cli):
    """`tfcalc memory deepseek-v3`: 673,150,552,416 bytes (0.673 TB; the published files, MTP module included,
    hold 0.689 TB), not the 1,342,052,808,704 of bf16. By hand: 61 MLA layers, 3 dense FFNs of 18432 and 58 MoE
    layers of 256 + 1 experts of 2048: their matrices at 1 byte per fp8 weight plus one 4-byte scale per 128×128
    tile (kv_a's 576 rows make 5 tile rows); embedding and head (2 × 129280 × 7168), routers (58 × 256 × 7168)
    and norms at 2 bytes. `--set stored_quant=null` gives the bf16 figure, 2 bytes × 671,026,404,352."""
    mats = 61 * _deepseek_mla() + 3 * _expert(18432) + 58 * 257 * _expert()
    fp8 = sum(r * c for r, c in mats)
    scales = sum(_cdiv(r, 128) * _cdiv(c, 128) for r, c in mats)
    rest = 2 * 129280 * 7168 + 58 * 256 * 7168 + 61 * (2 * 7168 + 1536 + 512) + 7168
    assert fp8 + rest == 671_026_404_352
    stored = cli("memory", "deepseek-v3", "--json").json()
    assert stored["weights_bytes"] == fp8 * 1 + scales * 4 + rest * 2 == 673_150_552_416
    assert stored["weight_format"]["parts_bytes"] == {"quantized": fp8, "scales": 4 * scales, "zero_points": 0,
                                                      "unquantized": 2 * rest}
    assert "weights fp8 as stored" in cli("memory", "deepseek-v3").out
    plain = cli("memory", "deepseek-v3", "--set", "stored_quant=null", "--json").json()
    assert plain["weights_bytes"] == 2 * 671_026_404_352 == 1_342_052_808_704


def test_memory_of_the_kimi_k2_preset_is_the_stored_figure_by_hand(cli):
    """Kimi K2 (moonshotai/Kimi-K2-Instruct, the same FP8 format): 64 heads, so q_b 12288×1536, kv_b 16384×512
    and o 7168×8192; 1 dense FFN of 18432, 60 MoE layers of 384 + 1 experts of 2048; vocabulary 163,840.
    1,029,173,157,728 bytes stored (1.03 TB), not 2,052,816,418,816 in bf16."""
    mla = [(1536, 7168), (12288, 1536), (576, 7168), (16384, 512), (7168, 8192)]
    mats = 61 * mla + 1 * _expert(18432) + 60 * 385 * _expert()
    fp8 = sum(r * c for r, c in mats)
    scales = sum(_cdiv(r, 128) * _cdiv(c, 128) for r, c in mats)
    rest = 2 * 163840 * 7168 + 60 * 384 * 7168 + 61 * (2 * 7168 + 1536 + 512) + 7168
    assert fp8 + rest == count.total(load("kimi-k2")) == 1_026_408_209_408
    stored = cli("memory", "kimi-k2", "--json").json()["weights_bytes"]
    assert stored == fp8 + 4 * scales + 2 * rest == 1_029_173_157_728
    assert cli("memory", "kimi-k2", "--set", "stored_quant=null", "--json").json()["weights_bytes"] == 2_052_816_418_816


def test_stored_quant_null_drops_the_stored_format_with_it():
    """`--set stored_quant=null` alone counts a quantized preset unquantized (the preset's other stored_quant_*
    fields go with it); a stored_quant_* field --set beside it is still refused, as it describes no format."""
    plain = load("deepseek-v3", ["stored_quant=null"])
    assert _stored_fields(plain) == dict.fromkeys(_stored_fields(plain))
    with pytest.raises(ConfigError, match="give stored_quant too"):
        load("deepseek-v3", ["stored_quant=null", "stored_quant_group=32"])
    other = load("deepseek-v3", ["stored_quant=int8", "stored_quant_scales=channel", "stored_quant_block=null"])
    assert (other.stored_quant, other.stored_quant_scales, other.stored_quant_keep) == ("int8", "channel", "lm_head")


# MiniMaxAI/MiniMax-M2/config.json's quantization_config (torch's dtype name in fmt; the router kept)
MINIMAX_M2_FP8 = {"activation_scheme": "dynamic", "fmt": "float8_e4m3fn", "quant_method": "fp8",
                  "weight_block_size": [128, 128],
                  "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"]}


def test_the_minimax_m2_preset_stores_fp8_as_its_checkpoint_by_hand(tmp_path, cli):
    """MiniMax-M2 is published in FP8 (128×128 blocks): the preset carries it. By hand: 62 layers of Q 6144×3072,
    K and V 1024×3072, O 3072×6144 and 256 experts of 3 × 1536×3072 at 1 byte, one fp32 scale per tile; embedding
    and head (2 × 200064 × 3072), routers (62 × 256 × 3072), norms (62 × (2·3072 + 6144 + 1024) + 3072) in bf16."""
    from test_hf_patterns import MINIMAX_M2

    assert _stored_fields(load("minimax-m2")) == _stored_fields(
        load(_write(tmp_path, {**MINIMAX_M2, "quantization_config": MINIMAX_M2_FP8})))
    mats = 62 * ([(6144, 3072), (1024, 3072), (1024, 3072), (3072, 6144)] + 256 * [(1536, 3072)] * 3)
    fp8 = sum(r * c for r, c in mats)
    scales = sum(_cdiv(r, 128) * _cdiv(c, 128) for r, c in mats)
    rest = 2 * 200064 * 3072 + 62 * 256 * 3072 + 62 * (2 * 3072 + 6144 + 1024) + 3072
    assert fp8 + rest == count.total(load("minimax-m2")) == 228_689_748_992
    stored = cli("memory", "minimax-m2", "--json").json()["weights_bytes"]
    assert stored == fp8 + 4 * scales + 2 * rest == 230_024_049_664


def test_torch_fp8_dtype_names_in_fmt_are_read(tmp_path):
    for fmt in ("float8_e4m3fn", "float8_e5m2", "e5m2"):
        assert load(_write(tmp_path, {**DEEPSEEK_V3, "quantization_config": {**DEEPSEEK_V3["quantization_config"],
                                                                           "fmt": fmt}}, fmt)).stored_quant == "fp8"
