"""The runtime's step has fixed shapes and never waits for the host (tfcalc.model.step), on every kind of
layer: every aten op a decode step runs is recorded with its arguments (tensor shapes and dtypes, every
other argument's value) by a TorchDispatchMode, and the record is the same at every step of a generation
that wraps a window's and a chunk's ring; no op reads a value back to the host. The generated logits equal
the uncached forward over the same tokens, and each layer's state is the bytes tfcalc.count.model.memory counts."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny
from torch.utils._python_dispatch import TorchDispatchMode

from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.model import build_model, next_token
from tfcalc.model.experts import MixtureOfExperts
from tfcalc.workload import Workload

ROPE = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu")
KINDS = {
    "dense-learned": {},  # GPT-2
    "llama-rope-gqa": dict(ROPE, n_head=8, n_kv_head=2),
    "window-wraps": dict(ROPE, n_head=4, n_kv_head=2, sliding_window=4),  # 12 new tokens through a ring of 4
    "chunked-llama4": dict(ROPE, n_layer=4, attention_chunk_size=3, full_attention_every=2, nope_every=2,
                           qk_l2_norm=True, attn_temperature_floor=2, attn_temperature_scale=0.5),
    "latent-deepseek": dict(ROPE, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, n_head=4),
    # DeepSeek-V3.2: the indexer's keys beside the latent, top-3 of up to 15 keys gathered on the device; 32 indexer
    # heads, so no key scores exactly 0 (every head's ReLU at 0: a tie torch.topk may break either way)
    "sparse-latent-dsa": dict(ROPE, kv_lora_rank=12, q_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                              v_head_dim=8, n_head=4, index_topk=3, index_n_heads=32, index_head_dim=8),
    "moe": dict(ROPE, n_expert=4, n_expert_active=2),
    "sinks-window-gpt-oss": dict(ROPE, attn_sinks=True, sliding_window=4, full_attention_every=2, n_head=4,
                                 n_kv_head=2),
    "softcap-gemma2": dict(ROPE, n_layer=4, sliding_window=4, full_attention_every=2, attn_softcap=50.0,
                           logit_softcap=30.0, norm_placement="sandwich"),
    "alibi": dict(pos_encoding="alibi", n_head=4),
    "alibi-window": dict(pos_encoding="alibi", sliding_window=5),
    # LFM2: short gated convolutions (a fixed state of K inputs, shifted in place) around an attention layer
    "conv-lfm2": dict(ROPE, n_layer=3, n_head=4, n_kv_head=2, qk_norm=True, layer_pattern="conv, full, conv",
                      conv_bias=True),
    # Jamba: Mamba-1 layers (a fixed conv and I × N state, its norms on dt, B, C) around an attention layer
    "mamba1-jamba": dict(ROPE, n_layer=3, n_head=4, n_kv_head=2, layer_pattern="mamba_one, full, mamba_one",
                         ssm_inner=64, ssm_state_size=6, ssm_bcdt_norm="weighted"),
    # Qwen3-Next: three gated-DeltaNet layers (a fixed conv and recurrent state) and a gated attention layer
    "gated-deltanet": dict(ROPE, n_layer=4, n_head=4, n_kv_head=2, full_attention_every=4, qk_norm=True,
                           attn_output_gate=True, rope_fraction=0.25, linear_mixer="gated_deltanet",
                           linear_key_heads=2, linear_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8),
    # OLMo-Hybrid: the DeltaNet's six projections and three convolutions, β in [0, 2], pre-norm beside output norms
    "gated-deltanet-olmo-hybrid": dict(ROPE, n_layer=4, n_head=4, full_attention_every=4, qk_norm=True,
                                       qk_norm_over="projection", norm_placement="output",
                                       linear_mixer="gated_deltanet", linear_key_heads=2, linear_value_heads=2,
                                       linear_key_head_dim=8, linear_value_head_dim=16,
                                       linear_separate_projections=True, linear_beta_scale=2.0,
                                       linear_norm_eps=1e-5, linear_norm_placement="pre"),
    # Kimi Linear: Kimi Delta Attention (a decay per key channel) beside latent attention without RoPE
    "kda-kimi-linear": dict(ROPE, n_layer=4, n_head=4, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
                            v_head_dim=8, layer_pattern="kda*2, nope, kda", kda_heads=2, kda_head_dim=8),
    # Ling 3: Kimi Delta Attention in its form (full decay and gate projections, the bounded decay) beside latent
    # attention with RoPE and a head gate
    "kda-bailing-hybrid": dict(ROPE, n_layer=4, n_head=4, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
                               v_head_dim=8, layer_pattern="kda*2, full, kda", kda_heads=2, kda_head_dim=8,
                               kda_form="bailing", kda_decay_limit=5.0, attn_head_gate=True),
    # MiniMax-01: lightning layers (a fixed (H, d, d) state, blocks of 2 in the prompt) around a softmax layer, the
    # residual after each norm weighted
    "lightning-minimax": dict(ROPE, n_layer=4, n_head=4, n_kv_head=2, layer_pattern="lightning, full, lightning*2",
                              lightning_block_size=2, norm_placement="normed_residual", residual_alpha=1.5,
                              residual_multiplier=0.75, n_expert=3, n_expert_active=2),
    # DeepSeek-V4: a window ring of 4, entries every 2 (CSA, an indexer's top-2) and every 4 (HCA) written once their
    # window closes, the open windows' buffers; hyper-connections of 2 streams
    "compressed-dsv4": dict(ROPE, n_layer=3, n_head=4, n_kv_head=1, d_head=16, rope_fraction=0.5, sliding_window=4,
                            layer_pattern="swa, csa, hca", attn_q_lora_rank=12, o_groups=2, o_lora_rank=6, csa_ratio=2,
                            hca_ratio=4, csa_index_topk=2, csa_index_heads=32, csa_index_head_dim=8,
                            hyper_connections=2),
    # Gemma 4: global layers of wider heads with V from K and proportional RoPE, weightless V norms, layer scalars,
    # per-layer inputs, the last 2 layers reading K/V (the global one past a ring-less source, the local one a ring)
    "gemma4-shared-ple": dict(ROPE, n_layer=4, n_head=4, n_kv_head=2, sliding_window=4, full_attention_every=2,
                              qk_norm=True, v_norm=True, global_d_head=16, global_n_kv_head=1, global_v_from_k=True,
                              layer_scalar=True, rope_scaling="proportional", rope_scaling_factor=1.0,
                              rope_proportion=0.25, rope_scaling_layers="full", kv_shared_layers=2, per_layer_dim=4,
                              norm_placement="sandwich"),
    # Gemma 4's experts beside the MLP (the router on the unnormed stream)
    "gemma4-moe-beside": dict(ROPE, n_expert=4, n_expert_active=2, shared_expert_d_ff=16, moe_beside_mlp=True,
                              norm_placement="sandwich", sliding_window=4, full_attention_every=2),
    # Gemma 3n: AltUp's 3 streams carried through every step, LAuReL, the sparsity, shared K/V
    "gemma3n-altup": dict(ROPE, n_layer=4, n_head=4, n_kv_head=2, sliding_window=4, full_attention_every=2,
                          qk_norm=True, v_norm=True, per_layer_dim=4, altup_inputs=3, laurel_rank=4,
                          kv_shared_layers=2, activation_sparsity=(0.9, 0.0, 0.0, 0.0), norm_placement="sandwich"),
}
PROMPT, NEW = 3, 12  # positions 0 .. 14: one bucket (min(16, 15)), every ring wrapped

# ops that read a tensor's value back to the host (or whose output shape depends on values: a sync on CUDA)
SYNCS = {"_local_scalar_dense", "nonzero", "item", "is_nonzero", "equal", "_assert_async", "masked_select",
         "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim", "bincount", "allclose",
         "repeat_interleave"}


def _describe(x):
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), x.dtype, x.device.type)
    if isinstance(x, (list, tuple)):
        return tuple(_describe(y) for y in x)
    if isinstance(x, dict):  # keyword arguments: an out= tensor by its shape, not its values
        return tuple((k, _describe(v)) for k, v in sorted(x.items()))
    return repr(x)


class Recorder(TorchDispatchMode):
    """Every aten op with its arguments described; paused inside a MoE layer's FFN (see _pause)."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple] = []
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.paused:
            bool_index = func.overloadpacket.__name__.startswith("index") and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool
                for a in args if isinstance(a, (list, tuple)) for i in a)
            self.ops.append((func.overloadpacket.__name__, bool_index, _describe(args), _describe(kwargs)))
        return func(*args, **kwargs)


def _pause(model, recorder: Recorder) -> list:
    """The MoE forward (tfcalc.model.experts, another part of the project) still reads its routing counts
    back to the host and loops over experts, so its ops depend on the routing: it is left out of the record
    until that forward is rebuilt (issue 29, "MoE as grouped matmuls"); the runtime around it is checked."""
    handles = []
    for m in model.modules():
        if isinstance(m, MixtureOfExperts):
            handles.append(m.register_forward_pre_hook(lambda *_: setattr(recorder, "paused", recorder.paused + 1)))
            handles.append(m.register_forward_hook(lambda *_: setattr(recorder, "paused", recorder.paused - 1)))
    return handles


def _generate_recorded(cfg, dtype=torch.float32):
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", dtype)
    prompt = torch.randint(0, cfg.vocab_size, (2, PROMPT), generator=torch.Generator().manual_seed(1))
    cache = model.new_cache(2, PROMPT + NEW)
    records, logits = [], []
    with torch.inference_mode():
        logits.append(model.prefill(prompt, cache))
        token = next_token(logits[-1])
        tokens = [prompt, token]
        for _ in range(NEW - 1):
            recorder = Recorder()
            handles = _pause(model, recorder)
            with recorder:
                step = model.decode(token, cache)
            for h in handles:
                h.remove()
            records.append(recorder.ops)
            logits.append(step)
            token = next_token(step)
            tokens.append(token)
    return model, cache, torch.cat(tokens, dim=1), torch.cat(logits, dim=1), records


@pytest.mark.parametrize("changes", KINDS.values(), ids=KINDS.keys())
def test_every_decode_step_runs_the_same_ops_on_the_same_shapes_without_a_sync(changes):
    cfg = tiny(max_seq_len=16, **changes)
    model, cache, tokens, logits, records = _generate_recorded(cfg)
    assert len(records) == NEW - 1 and records[0]
    for i, record in enumerate(records[1:], start=2):
        assert record == records[0], f"decode step {i} runs other ops or shapes than step 1"
    ops = {name for name, _, _, _ in records[0]}
    assert not ops & SYNCS, f"host syncs in a decode step: {ops & SYNCS}"
    assert not any(bool_index for _, bool_index, _, _ in records[0]), "a boolean index (nonzero) in a step"
    assert "scatter_" in ops or "scatter" in ops  # the new K and V written at device slots
    # the generated tokens' logits are the uncached forward's over the same tokens
    with torch.inference_mode():
        full = model(tokens[:, :-1])  # (B, PROMPT + NEW - 1, V)
    torch.testing.assert_close(logits, full[:, PROMPT - 1:], rtol=1e-4, atol=1e-5)
    # the state's bytes are the count's
    assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=PROMPT + NEW, dtype="fp32"))


def test_a_step_reads_a_bucket_not_the_whole_cache():
    """litgpt's input_pos_maxp1: at 5 positions of a 200-position cache a step reads 16 slots; past 16, 32."""
    from tfcalc.model.cache import bucket

    assert [bucket(n, 200) for n in (1, 5, 16, 17, 33, 129, 200)] == [16, 16, 16, 32, 64, 200, 200]
    cfg = tiny(max_seq_len=64, **KINDS["llama-rope-gqa"])
    model = build_model(cfg, "cpu")
    cache = model.new_cache(1, 64)
    seen = []

    class Spans(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "scaled_dot_product" in func.overloadpacket.__name__:
                seen.append(args[1].shape[2])
            return func(*args, **(kwargs or {}))

    with torch.inference_mode():
        model.prefill(torch.zeros(1, 15, dtype=torch.long), cache)
        with Spans():
            model.decode(torch.zeros(1, 1, dtype=torch.long), cache)  # position 15: 16 live
            model.decode(torch.zeros(1, 1, dtype=torch.long), cache)  # position 16: 17 live
    assert seen[0] == 16 and seen[-1] == 32


def test_each_state_tensor_is_what_its_component_describes():
    """Per layer: one tensor per state_tensors() entry, (B, heads, kv_positions, width), whose bytes sum to
    the component's kv_elements per position: for full, window, chunk, GQA and latent layers."""
    for changes in (KINDS["llama-rope-gqa"], KINDS["window-wraps"], KINDS["chunked-llama4"],
                    KINDS["latent-deepseek"]):
        cfg = tiny(max_seq_len=16, **changes)
        cache = build_model(cfg, "meta", torch.bfloat16).new_cache(3, 11)
        for state, block in zip(cache.states, cfg.architecture.output.layers(), strict=True):
            a = block.attention
            shapes = [(3, heads, a.kv_positions(11), width) for _, heads, width in a.state_tensors()]
            assert [tuple(t.shape) for t in state.tensors] == shapes
            assert state.nbytes == 3 * a.kv_elements() * a.kv_positions(11) * 2
        assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=3, seq=11, dtype="bf16"))


def _record(fn) -> list[tuple]:
    recorder = Recorder()
    with recorder:
        fn()
    return recorder.ops


def test_verify_steps_and_rows_at_their_own_positions_run_fixed_shapes():
    """The same step for speculative verify (three tokens at a time, rewound) and for continuous batching's
    rows (each at its own length, tfcalc.model.slots): the same ops and shapes at every position, no sync."""
    from tfcalc.model.slots import SlotCache, decode_rows

    cfg = tiny(max_seq_len=32, **KINDS["llama-rope-gqa"])
    torch.manual_seed(0)
    model = build_model(cfg, "cpu")
    tokens = torch.randint(0, cfg.vocab_size, (1, 3))
    cache = model.new_cache(1, 16)
    verify, rows = [], []
    with torch.inference_mode():
        model.prefill(torch.zeros(1, 4, dtype=torch.long), cache)
        for _ in range(4):  # positions 4.., 5.., 6.., 7..: three rows each, one kept
            kept = cache.length + 1
            verify.append(_record(lambda: model.extend(tokens, cache)))
            cache.rewind(kept)
        slots = SlotCache(model, rows=2, max_tokens=16)
        slots.admit(torch.zeros(1, 3, dtype=torch.long), model)
        slots.admit(torch.zeros(1, 6, dtype=torch.long), model)
        last = torch.zeros(2, 1, dtype=torch.long)
        for _ in range(5):  # rows at 3 and 6, then 4 and 7, ...
            rows.append(_record(lambda: decode_rows(model, last, slots)))
    for record in (verify, rows):
        assert all(r == record[0] for r in record[1:])
        assert not {name for name, _, _, _ in record[0]} & SYNCS


@pytest.mark.parametrize("kind", ["window-wraps", "chunked-llama4", "sinks-window-gpt-oss", "softcap-gemma2"])
def test_verify_steps_on_a_ring_with_spare_slots_run_fixed_shapes(kind):
    """A ring of W + 2 slots (tfcalc.model.attention_state) verifying three tokens at a time, rewound to keep
    one to three of them, wrapping many times: the same ops and shapes at every verify step, no sync, and
    each verify's logits the uncached forward's."""
    cfg = tiny(max_seq_len=32, **KINDS[kind])
    torch.manual_seed(0)
    model = build_model(cfg, "cpu")
    seq = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(2))
    cache = model.new_cache(2, 16, spare=2)  # one bucket: every step reads the whole ring
    records = []
    with torch.inference_mode():
        full = model(seq)
        model.prefill(seq[:, :3], cache)
        for kept in [1, 3, 2, 1, 1, 2, 3]:
            at, out = cache.length, []
            step = seq[:, at:at + 3]
            records.append(_record(lambda x=step, o=out: o.append(model.extend(x, cache))))
            torch.testing.assert_close(out[0], full[:, at:at + 3], rtol=1e-4, atol=1e-5)
            cache.rewind(at + kept)
    assert all(r == records[0] for r in records[1:])
    assert not {name for name, _, _, _ in records[0]} & SYNCS
    assert cache.length == 16 and min(cache.slots) <= 8  # a ring of W + 2 <= 8 slots wrapped twice


@pytest.mark.parametrize("kind", ["llama-rope-gqa", "dense-learned", "window-wraps", "alibi-window",
                                  "latent-deepseek", "sparse-latent-dsa"])
def test_rows_joining_and_leaving_run_the_same_step(kind):
    """Continuous batching's step over all the slots, whatever the occupancy (tfcalc.model.slots): one row in
    flight, then two, three, a row leaving (the last moving into it) and another joining -- the same ops
    and shapes at every step, no sync; each row in flight gets the logits of its sequence alone (the
    uncached forward), the free rows' state being no sequence's."""
    from tfcalc.model.slots import SlotCache, decode_rows

    cfg = tiny(max_seq_len=16, **KINDS[kind])
    torch.manual_seed(0)
    model = build_model(cfg, "cpu")
    seqs = torch.randint(0, cfg.vocab_size, (4, 14), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        full = model(seqs)  # (4, 14, V): each sequence alone
    slots = SlotCache(model, rows=3, max_tokens=16)
    owner: list[int] = []  # sequence per row in flight
    records = []
    with torch.inference_mode():
        def admit(i: int, prompt: int) -> None:
            slots.admit(seqs[i:i + 1, :prompt], model)
            owner.append(i)

        def step() -> None:
            tokens = torch.zeros(3, 1, dtype=torch.long)  # a free row's token: anything
            positions = list(slots.lengths)
            for r, i in enumerate(owner):
                tokens[r, 0] = seqs[i, positions[r]]
            out = []
            records.append(_record(lambda: out.append(decode_rows(model, tokens, slots))))
            assert out[0].shape == (3, 1, cfg.vocab_size)
            for r, i in enumerate(owner):
                torch.testing.assert_close(out[0][r, 0], full[i, positions[r]], rtol=1e-4, atol=1e-5)

        admit(0, 3)
        step()  # one row in flight of three
        admit(1, 5)
        step()
        admit(2, 2)
        step()  # all three
        slots.release(0)  # sequence 0 leaves, sequence 2 moves into row 0
        owner[0] = owner.pop()
        step()
        slots.release(1)  # sequence 1 leaves: one row in flight
        owner.pop()
        step()
        admit(3, 4)  # joins a freed row
        step()
        step()
    assert len(records) == 7 and records[0]
    for k, record in enumerate(records[1:], start=2):
        assert record == records[0], f"step {k} (rows in flight changed) runs other ops or shapes than step 1"
    ops = {name for name, _, _, _ in records[0]}
    assert not ops & SYNCS, f"host syncs in a rows step: {ops & SYNCS}"
    assert not any(bool_index for _, bool_index, _, _ in records[0]), "a boolean index (nonzero) in a step"


def test_the_decoder_runs_eager_here_and_refuses_graphs_without_cuda():
    from tfcalc.errors import InputError
    from tfcalc.model import Decoder, generate

    cfg = tiny(max_seq_len=16, **KINDS["window-wraps"])
    torch.manual_seed(0)
    model = build_model(cfg, "cpu")
    prompt = torch.randint(0, cfg.vocab_size, (2, 3), generator=torch.Generator().manual_seed(1))
    tokens = generate(model, prompt, 12)
    assert torch.equal(tokens, generate(model, prompt, 12, mode="eager"))
    cache = model.new_cache(2, 15)
    assert Decoder(model, cache).mode == "eager"
    for mode, message in (("graph", "needs a CUDA device"), ("compile", "needs a CUDA device"), ("fast", "one of")):
        with pytest.raises(InputError, match=message):
            Decoder(model, cache, mode)
    with pytest.raises(InputError, match="call prefill"):
        Decoder(model, cache).step(tokens[:, :1])
