"""Hypothesis strategies for tests/test_config_fuzz.py: a valid config.json of each issue-30 model type at a small
size, every structural key a published file may set drawn (given with a value, or left out for the config class's
default), and the checks held on each (tfcalc's parameters equal to transformers' on meta; its generation state
equal to transformers' cache; or one line of refusal)."""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path

from hypothesis import HealthCheck, settings, strategies as st

from tfcalc.count.model import params as count
from tfcalc.errors import InputError
from tfcalc.presets import load

B = st.booleans()
# the same draws on every run (derandomize), so the suite cannot fail by chance; TFCALC_FUZZ_EXAMPLES=500 (with
# TFCALC_FUZZ_RANDOM=1 for fresh draws) searches further by hand
FUZZ = settings(max_examples=int(os.environ.get("TFCALC_FUZZ_EXAMPLES", "20")), deadline=None,
                derandomize=not os.environ.get("TFCALC_FUZZ_RANDOM"), suppress_health_check=list(HealthCheck),
                database=None)


def put(draw, d: dict, key: str, strategy, p_absent: bool = True) -> None:
    """d[key] drawn from strategy, or (when p_absent) the key left out: the config class's default."""
    if p_absent and draw(st.booleans()):
        return
    d[key] = draw(strategy)


def heads(draw, n=(1, 2, 4, 8)) -> tuple[int, int]:
    """(query heads, K/V heads dividing them)."""
    h = draw(st.sampled_from(n))
    return h, draw(st.sampled_from([k for k in (1, 2, 4, 8) if h % k == 0]))


def attention(draw, d: dict, kv=True, head_dim=(16, 32)) -> None:
    """num_attention_heads, num_key_value_heads (or absent), head_dim (or absent: hidden / heads)."""
    h, k = heads(draw)
    d["num_attention_heads"] = h
    if kv:
        put(draw, d, "num_key_value_heads", st.just(k))
    if head_dim:
        put(draw, d, "head_dim", st.sampled_from(head_dim))


def rope(draw, d: dict, kinds=("default", "linear", "dynamic", "yarn", "llama3"), key=None) -> None:
    """rope_parameters (or a legacy rope_scaling) of one of kinds, or neither."""
    kind = draw(st.sampled_from((None,) + tuple(kinds)))
    if kind is None:
        return
    p = {"rope_type": kind, "rope_theta": 10000.0}
    if kind in ("linear", "dynamic", "yarn", "llama3"):
        p["factor"] = draw(st.sampled_from([2.0, 4.0, 8.0]))
    if kind in ("yarn", "llama3"):
        p["original_max_position_embeddings"] = 64
    if kind == "llama3":
        p.update(low_freq_factor=1.0, high_freq_factor=4.0)
    if key or draw(st.booleans()):
        d[key or "rope_parameters"] = p
    else:
        d["rope_scaling"] = {k: v for k, v in p.items() if k != "rope_theta"}
        d["rope_theta"] = 10000.0


def pattern(draw, n: int, kinds: list[str], must: tuple[str, ...] = ()) -> list[str]:
    """A layer list of n of kinds (each of must present where n allows)."""
    out = draw(st.lists(st.sampled_from(kinds), min_size=n, max_size=n))
    for i, k in enumerate(must[:n]):
        if k not in out:
            free = [j for j, x in enumerate(out) if x not in must[:i] or out.count(x) > 1]
            out[draw(st.sampled_from(free))] = k
    return out


def base(draw, model_type: str, arch: str, layers=(1, 6)) -> dict:
    d = {"model_type": model_type, "architectures": [arch], "hidden_size": 64, "vocab_size": 96, "pad_token_id": 0,
         "num_hidden_layers": draw(st.integers(*layers))}
    put(draw, d, "tie_word_embeddings", B)
    put(draw, d, "intermediate_size", st.sampled_from([48, 96]))
    return d


def hybrid(draw, n: int, kinds=("linear_attention", "full_attention")) -> list[str]:
    return pattern(draw, n, list(kinds), (kinds[1], kinds[0]))


def mla(draw, d: dict, q_lora=True) -> None:
    """Multi-head latent attention's sizes (DeepSeek-V2's)."""
    d["num_attention_heads"] = draw(st.sampled_from([1, 2, 4]))
    d.update(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=draw(st.sampled_from([8, 16])),
             v_head_dim=draw(st.sampled_from([8, 16])))
    if q_lora:
        d["q_lora_rank"] = draw(st.sampled_from([None, 24]))


def moe(draw, d: dict, experts="n_routed_experts", top="num_experts_per_tok", width="moe_intermediate_size",
        shared="n_shared_experts", groups=("n_group", "topk_group")) -> None:
    e = draw(st.sampled_from([4, 8]))
    d.update({experts: e, top: draw(st.sampled_from([1, 2])), width: 16})
    if shared:
        put(draw, d, shared, st.sampled_from([0, 1, 2]))
    if groups and draw(B):
        g = draw(st.sampled_from([1, 2]))
        d.update({groups[0]: g, groups[1]: draw(st.integers(1, g))})


def transformers_model(data: dict):
    import torch
    import transformers
    from transformers.initialization import no_init_weights

    keys = {k: v for k, v in data.items() if k != "model_type"}
    with warnings.catch_warnings(), torch.device("meta"), no_init_weights():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(data["model_type"], **keys)
        model = getattr(transformers, data["architectures"][0])(config)
    model.tie_weights()
    return model


def apart(data: dict, model) -> int:
    """Parameters transformers builds that tfcalc counts otherwise, by the project's stated conventions:
    LongCat-Flash's zero experts' gate_up rows (allocated, never read: tests/test_longcat_flash.py) and ERNIE-4.5's
    router correction bias (a buffer in tfcalc: tests/test_hf_moe_more.py)."""
    if data["model_type"] == "longcat_flash":
        return sum(layer.mlp.experts.gate_up_proj[layer.mlp.experts.num_routed_experts:].numel()
                   for layer in model.model.layers)
    return sum(p.numel() for n, p in model.named_parameters() if n.endswith("moe_statics.e_score_correction_bias"))


def tfcalc_config(data: dict):
    """tfcalc's config of data written as a config.json; None where refused (in one line)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(data))
        try:
            return load(str(path))
        except InputError as e:
            assert "\n" not in str(e), str(e)
            return None


# refusals of configs transformers builds on meta but could not run, each stated by tfcalc (tests/test_hf_defaults.py)
REFUSED = (r"must be a multiple of (local_)?n_kv_head", r"missing required field")


def cache_bytes(cache) -> int:
    """Every tensor a transformers cache holds, each once: each layer's tensors and those of its dicts (keys,
    values, DSA's indexer_keys, convolution and recurrent states, ...) and MiniMaxCache's linear_cache, kept
    apart from its layers."""
    import torch

    tensors = {}
    for layer in cache.layers:
        for value in vars(layer).values():
            for t in (value.values() if isinstance(value, dict) else [value]):
                if isinstance(t, torch.Tensor) and t.is_floating_point():  # not a length or window counter
                    tensors[id(t)] = t
    tensors.update((id(t), t) for t in getattr(cache, "linear_cache", []) if isinstance(t, torch.Tensor))
    return sum(t.numel() * t.element_size() for t in tensors.values())


def check(data: dict, state_tokens: int | None = 64, refusals: tuple[str, ...] = ()) -> None:
    """tfcalc counts data as transformers builds it (or refuses it in one line matching one of refusals, a config
    transformers builds but tfcalc states it does not count); the state at state_tokens equals transformers'
    cache."""
    import re

    import torch

    cfg = tfcalc_config(data)
    model = transformers_model(data)
    if cfg is None:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "config.json"
            path.write_text(json.dumps(data))
            try:
                load(str(path))
            except InputError as e:
                assert any(re.search(r, str(e)) for r in REFUSED + refusals), f"refused what transformers builds: {e}"
        return
    want = sum(p.numel() for p in model.parameters()) - apart(data, model)
    assert count.total(cfg) + (cfg.vision_params or 0) == want
    if state_tokens is None or '"dynamic"' in json.dumps(data):  # dynamic RoPE reads its length back (.item())
        return
    from tfcalc.count.model.memory import kv_cache_bytes
    from tfcalc.workload import Workload

    model = model.to(torch.bfloat16).eval()
    try:
        with torch.no_grad():
            out = model(torch.zeros(1, state_tokens, dtype=torch.long, device="meta"), use_cache=True)
    except ValueError as e:  # transformers' hybrid caches need one attention layer to read their length from
        assert "get_seq_length" in str(e)
        return
    cache = getattr(out, "cache", None) or out.past_key_values
    T = state_tokens
    rings = sum(b.attention.kv_elements() * (b.attention.kv_positions(T) < T)
                for b in cfg.architecture.output.layers() if hasattr(b.attention, "kv_positions"))
    assert kv_cache_bytes(cfg, Workload(batch=1, seq=T, kv_dtype="bf16")) - 2 * rings == cache_bytes(cache)
