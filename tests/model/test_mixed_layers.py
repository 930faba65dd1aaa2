"""The module built from a per-layer description whose layers differ in what flat fields cannot say: each
layer its own sliding window, its own RoPE base or none (NoPE), its own V head width -- Gemma 3's local
and global bases, Llama 4's NoPE layers. Property test: the analytic parameters equal the module's numel
and a checkpoint written and read back; the KV bytes equal the cache the model allocates; analytic FLOPs
equal FlopCounterMode; a prompt then decode steps give the logits of one forward pass."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import configs, tiny
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from safetensors.torch import load_file, save_file

from tfcalc.architecture import Architecture, Stack, compress
from tfcalc.checkpoint.count import piece_counts
from tfcalc.checkpoint.files import read_headers
from tfcalc.checkpoint.names import Piece
from tfcalc.config import replace
from tfcalc.count.model import flops as count_flops, params as count
from tfcalc.errors import InputError
from tfcalc.measure.flops import measure_flops
from tfcalc.measure.params import measured_breakdown, measured_total
from tfcalc.model import build_model
from tfcalc.model.cache import check_decodable
from tfcalc.workload import Workload


def with_architecture(cfg, arch: Architecture):
    """cfg describing ``arch`` instead of what its flat fields build: ``cfg.architecture`` is computed once
    and kept in the instance (functools.cached_property), so every count and the model read this one.
    Renamed, so no cache keyed by the config's fields can mistake it for the flat one."""
    out = replace(cfg, name=f"{cfg.name} (mixed)")
    out.__dict__["architecture"] = arch
    return out


def remix(arch: Architecture, draw, v_heads: bool = True) -> Architecture:
    """Each self-attention layer redrawn: its window (causal layers), its RoPE base or none (a rotary
    stack), its V head width (``v_heads``)."""
    stacks = []
    for stack in arch.stacks:
        layers = []
        for block in stack.layers():
            a, changes = block.attention, {}
            if a.causal:  # a window, a chunk (Llama 4) or neither
                span = draw(st.sampled_from([None, 1, 3, 5, "chunk 1", "chunk 4"]))
                changes["window"] = span if not isinstance(span, str) else None
                changes["chunk"] = int(span.split()[1]) if isinstance(span, str) else None
            if stack.embeddings.positions == "rope":
                theta = draw(st.sampled_from([None, 10_000.0, 1_000_000.0]), label="rope base")
                changes.update(rope_theta=theta, rope_dim=0 if theta is None else a.rope_dim or a.head_dim)
            if v_heads:
                changes["v_head_dim"] = draw(st.sampled_from([None, 2, 6]), label="v_head_dim")
            layers.append(dataclasses.replace(block, attention=dataclasses.replace(a, **changes)))
        stacks.append(Stack(compress(layers), stack.embeddings, stack.final_norm, stack.name))
    return Architecture(arch.kind, tuple(stacks), arch.head)


@st.composite
def mixed_configs(draw, v_heads: bool = True):
    cfg = draw(configs(extras=True))
    return with_architecture(cfg, remix(cfg.architecture, draw, v_heads))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=mixed_configs())
def test_params_equal_numel_and_a_checkpoint_written_and_read_back(tmp_path_factory, cfg):
    model = build_model(cfg, "cpu")
    assert measured_total(model) == count.total(cfg)
    assert measured_breakdown(model) == count.breakdown(cfg)
    path = tmp_path_factory.mktemp("ckpt") / "model.safetensors"
    save_file({name: p.detach().clone() for name, p in model.named_parameters()}, str(path))  # tied: once
    read: dict[str, int] = {}
    for tensor in read_headers(path).tensors:  # tfcalc's own names, split into components by each layer's widths
        for component, n in piece_counts(cfg, Piece(tensor.name), tensor).items():
            read[component] = read.get(component, 0) + n
    assert read == {c: n for c, n in count.breakdown(cfg).items() if n}
    again = build_model(cfg, "cpu")
    missing, unexpected = again.load_state_dict(load_file(str(path)), strict=False)
    assert unexpected == [] and set(missing) <= {"lm_head.weight", "encoder.tok_emb.weight"}  # tied ones
    for name, p in again.named_parameters():
        torch.testing.assert_close(p, dict(model.named_parameters())[name], rtol=0, atol=0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_configs(), st.integers(1, 3), st.data())
def test_kv_bytes_equal_the_cache_the_model_allocates(cfg, batch, data):
    """Windowed layers cache only their window (W slots, a ring: tfcalc.model.cache), as the analytic KV
    bytes count them (Attention.kv_positions)."""
    tokens = data.draw(st.integers(1, cfg.max_seq_len), label="tokens")
    try:
        check_decodable(cfg, tokens)
    except InputError:
        assume(False)
    cache = build_model(cfg, "meta").new_cache(batch, tokens)
    assert cache.nbytes == 4 * batch * cfg.architecture.kv_elements(tokens)  # fp32
    assert cache.slots == [b.attention.kv_positions(tokens) for b in cfg.architecture.output.layers()]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_configs(), st.integers(1, 2), st.data())
def test_flops_equal_flop_counter_mode(cfg, batch, data):
    """Full-square convention: per-layer windows and RoPE bases move no matmul FLOP, a layer's own V width
    does; the module's count (FlopCounterMode on CPU) equals the analytic fold over the layers."""
    seq = data.draw(st.integers(1, cfg.max_seq_len), label="seq")
    src_seq = data.draw(st.integers(1, cfg.max_seq_len), label="src") if (
        cfg.arch == "encoder-decoder" or cfg.cross_attention) else None
    assert (
        measure_flops(cfg, Workload(batch=batch, seq=seq, src_seq=src_seq), "cpu").total
        == count_flops.breakdown(cfg, Workload(batch=batch, seq=seq, src_seq=src_seq)).forward
    )


@settings(max_examples=20, deadline=None,  # undecodable draws (one position, capacities) are skipped: many
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(mixed_configs(), st.data())
def test_prompt_then_decode_steps_give_the_logits_of_one_forward(cfg, data):
    """The cache holds each layer's keys rotated by that layer's own base (or not at all) and only its
    window: decoding token by token must reproduce the full forward pass."""
    assume(cfg.max_seq_len >= 2)
    # an expert capacity drops tokens by how many share the step (Fedus et al. 2021, "Switch Transformers",
    # arXiv 2101.03961, sec. 2.2): a prompt of T tokens and T one-token steps route differently by design
    assume(cfg.expert_capacity_factor is None)
    T = data.draw(st.integers(2, cfg.max_seq_len), label="tokens")
    prompt = data.draw(st.integers(1, T - 1), label="prompt")
    try:
        check_decodable(cfg, T)
    except InputError:
        assume(False)
    model = build_model(cfg, "cpu")
    idx = torch.randint(0, cfg.vocab_size, (2, T))
    S = data.draw(st.integers(1, cfg.max_seq_len), label="source")
    src = torch.randint(0, cfg.vocab_size, (2, S)) if cfg.arch == "encoder-decoder" else None
    with torch.no_grad():
        full = model(src, idx) if src is not None else model(idx)
        cache = model.new_cache(2, T)
        steps = [model.prefill(idx[:, :prompt], cache, src, last_only=False)]
        steps += [model.decode(idx[:, t:t + 1], cache) for t in range(prompt, T)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)


def _rope_arch(cfg, thetas):
    layers = [dataclasses.replace(b, attention=dataclasses.replace(b.attention, rope_theta=t,
                                                                   rope_dim=0 if t is None else cfg.head_dim))
              for b, t in zip(cfg.architecture.output.layers(), thetas, strict=True)]
    stack = cfg.architecture.output
    return Architecture(cfg.arch, (Stack(compress(layers), stack.embeddings, stack.final_norm),),
                        cfg.architecture.head)


@pytest.mark.parametrize("theta", [10_000.0, 500.0])
def test_one_base_in_every_layer_is_the_flat_rotary_model(theta):
    """Independent of the per-layer path: the same weights under the flat config with that rope_theta."""
    cfg = tiny(pos_encoding="rope", rope_theta=theta)
    flat = build_model(cfg, "cpu")
    mixed = build_model(with_architecture(cfg, _rope_arch(cfg, [theta, theta])), "cpu")
    mixed.load_state_dict(flat.state_dict())
    idx = torch.randint(0, cfg.vocab_size, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(mixed(idx), flat(idx), rtol=0, atol=0)


def test_each_layer_rotates_by_its_own_base_or_not_at_all():
    """Local base in layer 0, global in layer 1 (Gemma 3's pair) differs from either alone and from the
    swapped pair; a NoPE layer differs from a rotary one; the stack holds one table per distinct base."""
    cfg = tiny(pos_encoding="rope")
    pairs = [(10_000.0, 1_000_000.0), (1_000_000.0, 10_000.0), (10_000.0, 10_000.0), (None, 10_000.0)]
    models = [build_model(with_architecture(cfg, _rope_arch(cfg, p)), "cpu") for p in pairs]
    assert [len(m.ropes) for m in models] == [2, 2, 1, 1]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    idx = torch.randint(0, cfg.vocab_size, (1, 12))
    with torch.no_grad():
        outs = [m(idx) for m in models]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            assert not torch.allclose(outs[i], outs[j]), (pairs[i], pairs[j])
