"""Property test over random small architectures, mixed layers included (first k dense, every n-th MoE,
alternating windows): every figure folded over the description (tfcalc.architecture) equals what the real
module holds, computes and allocates."""

from __future__ import annotations

import math

from conftest import configs
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tfcalc.count.model import flops as count_flops, params as count
from tfcalc.count.model.memory import cross_kv_cache_bytes, kv_cache_bytes
from tfcalc.count.training.shard import check_tp, stage_tensors, tied_stage_copy, total_blocks, tp_local_shape
from tfcalc.errors import InputError
from tfcalc.measure.flops import measure_flops
from tfcalc.measure.params import measured_breakdown, measured_total
from tfcalc.model import build_model
from tfcalc.model.cache import check_decodable
from tfcalc.workload import Workload


def shard_sum(cfg, tp: int, pp: int) -> int:
    """Parameters summed over every TP rank of every pipeline stage, each tensor counted once: a split one
    as the sum of its ranks' torch.chunk blocks, a replicated one once, the tied embedding that the first
    and last stages both hold once."""
    total = 0
    for stage in range(pp):
        for t, copies in stage_tensors(cfg, pp, stage):
            ranks = range(tp) if t.tp_split else range(1)
            total += copies * sum(math.prod(tp_local_shape(t, tp, r)) for r in ranks)
    tied = tied_stage_copy(cfg, pp)
    return total - (tied.numel if tied is not None else 0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(mixed=True), st.sampled_from([1, 2, 4]), st.data())
def test_params_equal_numel_on_meta_and_the_sum_of_a_plans_shards(cfg, tp, data):
    model = build_model(cfg, "meta")
    assert measured_total(model) == count.total(cfg)
    assert measured_breakdown(model) == count.breakdown(cfg)
    pp = data.draw(st.integers(1, total_blocks(cfg)), label="pp") if cfg.arch != "encoder-decoder" else 1
    try:
        check_tp(cfg, tp)
    except InputError:
        tp = 1  # this draw's widths do not split tp ways
    assert shard_sum(cfg, tp, pp) == count.total(cfg)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(mixed=True), st.integers(1, 2), st.data())
def test_flops_equal_flop_counter_mode_on_cpu(cfg, batch, data):
    seq = data.draw(st.integers(1, cfg.max_seq_len), label="seq")
    src_seq = data.draw(st.integers(1, cfg.max_seq_len), label="src") if (
        cfg.arch == "encoder-decoder" or cfg.cross_attention) else None
    m = measure_flops(cfg, Workload(batch=batch, seq=seq, src_seq=src_seq), "cpu")
    b = count_flops.breakdown(cfg, Workload(batch=batch, seq=seq, src_seq=src_seq))
    assert m.total == b.forward
    assert m.groups == dict({g: n for g, n in b.totals().items() if g != "embeddings" or n}, other=0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(mixed=True), st.integers(1, 3), st.data())
def test_kv_bytes_equal_the_cache_the_model_allocates(cfg, batch, data):
    tokens = data.draw(st.integers(1, cfg.max_seq_len), label="tokens")
    try:
        check_decodable(cfg, tokens)
    except InputError:
        assume(False)
    cache = build_model(cfg, "meta").new_cache(batch, tokens)  # fp32 buffers on meta: sizes, no memory
    own = kv_cache_bytes(cfg, Workload(batch=batch, seq=tokens, dtype="fp32")) - cross_kv_cache_bytes(
        cfg, Workload(batch=batch, seq=tokens, dtype="fp32")
    )
    assert cache.nbytes == own  # the cross-attention K and V are allocated once the encoder has run
    assert own == 4 * batch * cfg.architecture.kv_elements(tokens)


@st.composite
def hf_configs(draw):
    """(transformers config class, model class, keyword arguments): random small Llama, Mistral (a window),
    Qwen2-MoE and Qwen3-MoE models, the MoE ones with dense layers among the experts' (mlp_only_layers,
    decoder_sparse_step) and a shared expert or not; GQA, biases, tied embeddings or not."""
    kind = draw(st.sampled_from(["llama", "mistral", "qwen2_moe", "qwen3_moe"]), label="kind")
    heads = draw(st.sampled_from([2, 4]), label="heads")
    layers = draw(st.integers(1, 4), label="layers")
    kw = dict(vocab_size=draw(st.integers(17, 70)), hidden_size=8 * heads, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=draw(st.sampled_from([1, heads])),
              intermediate_size=draw(st.integers(4, 40)), max_position_embeddings=32,
              tie_word_embeddings=draw(st.booleans()))
    if kind == "llama":
        kw.update(attention_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()))
        return "LlamaConfig", "LlamaForCausalLM", kw
    if kind == "mistral":
        return "MistralConfig", "MistralForCausalLM", dict(kw, sliding_window=draw(st.integers(2, 8)))
    dense = sorted(draw(st.sets(st.integers(0, layers - 1)), label="mlp_only_layers"))
    step = draw(st.integers(1, 2), label="decoder_sparse_step")
    # some layer has the experts (modeling_qwen2_moe.py: i not in mlp_only_layers and (i + 1) % step == 0);
    # a config whose every layer is dense is refused ("leave out n_expert"), not read as the dense model
    assume(any(i not in dense and (i + 1) % step == 0 for i in range(layers)))
    kw.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=draw(st.integers(4, 16)),
              mlp_only_layers=dense, decoder_sparse_step=step, norm_topk_prob=draw(st.booleans()))
    if kind == "qwen2_moe":
        kw.update(shared_expert_intermediate_size=draw(st.integers(4, 24)))
        return "Qwen2MoeConfig", "Qwen2MoeForCausalLM", kw
    return "Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(kw, head_dim=draw(st.sampled_from([4, 8])))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hf_configs())
def test_params_equal_a_checkpoint_written_and_read_back(spec):
    """The analytic count of a random architecture, mixed layers included, equals the elements of the
    checkpoint transformers writes for it (read back by the safetensors headers and the name map), the
    module tfcalc builds (numel on meta) and transformers' own module."""
    import tempfile
    import warnings

    import transformers

    from tfcalc.checkpoint import count_checkpoint
    from tfcalc.presets import load

    config_class, model_class, kw = spec
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = getattr(transformers, model_class)(getattr(transformers, config_class)(**kw))
        hf.save_pretrained(folder)
        cfg = load(folder)
        written = count_checkpoint(cfg, folder)
    assert written.agrees and written.total == count.total(cfg)
    assert measured_total(build_model(cfg, "meta")) == count.total(cfg) == sum(p.numel() for p in hf.parameters())
