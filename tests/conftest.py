"""Shared test helpers: tiny configs (forward passes stay fast on 2 cores) and a CLI runner."""

from __future__ import annotations

import json
import os
import signal

# One thread for torch here and in the child processes the tests start (they inherit the environment;
# torch reads it when it is first imported). The tests run tiny models, whose ops gain nothing from a
# second thread, and on a busy machine every op's fork/join waits for a descheduled thread. Results do
# not depend on it; tfcalc itself keeps torch's default.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# A suite started in the background by a non-interactive shell (`pytest ... &`, nohup) inherits SIGINT ignored,
# and an ignored signal stays ignored across exec: the processes the tests start would ignore the Ctrl-C the
# signal tests send them (tests/cli/test_hostile_process.py, tests/measure/test_rank_lifeline.py). A handled
# signal is reset to its default across exec, so handling it here gives the children a terminal's SIGINT.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import pytest  # noqa: E402 -- below the environment set above, which must come before any import of torch
from hypothesis import strategies as st

from tfcalc.cli.app import run
from tfcalc.config import ModelConfig, replace


def single_device_first_loss(cfg: ModelConfig) -> float:
    """The measured pipelines' reference: the first micro-batch's loss of the same model (seed 0) on one
    device, fp32, on the tokens the ranks draw (generator seed 1000, a (2, 16) batch, micro-batch 1)."""
    import torch
    import torch.nn.functional as F

    from tfcalc.model import build_model

    torch.manual_seed(0)
    model = build_model(cfg, "cpu", torch.float32)
    gen = torch.Generator().manual_seed(1000)
    idx = torch.randint(0, cfg.vocab_size, (2, 16), generator=gen)[:1]
    with torch.no_grad():
        return float(F.cross_entropy(model(idx).float().view(-1, cfg.vocab_size), idx.view(-1)))


def tiny(**changes) -> ModelConfig:
    """A 2-layer GPT-2-shaped config small enough for a CPU forward pass in milliseconds."""
    fields = dict(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=16)
    fields.update(changes)
    return ModelConfig(**fields)


# the kinds of transformer at tiny sizes, as field changes to tiny()
BERT_LIKE = dict(arch="encoder", type_vocab_size=2, embedding_norm=True, pooler=True, lm_head=False,
                 tie_embeddings=False, norm_placement="post", final_norm=False)
VASWANI_LIKE = dict(arch="encoder-decoder", pos_encoding="sinusoidal", embedding_scale=True,
                    norm_placement="post", final_norm=False, activation="relu", attn_bias=False)
MIXTRAL_LIKE = dict(n_expert=4, n_expert_active=2, gated_ffn=True, activation="silu", n_head=8, n_kv_head=2,
                    pos_encoding="rope", norm="rmsnorm", norm_bias=False, attn_bias=False, ffn_bias=False)


@st.composite
def configs(draw, mixed: bool = False, extras: bool | None = None) -> ModelConfig:
    """Random valid configs over every option (every arch, dense and MoE), at tiny sizes; with ``mixed``,
    MoE models may also mix dense layers in (first_dense_layers, moe_every, dense_d_ff, dense_layers).
    ``extras`` (default: as ``mixed``) draws gpt-oss's and Qwen3-MoE's fields too (sinks, router bias,
    clamped SwiGLU, listed dense layers)."""
    mixed_allowed = mixed
    extras = mixed if extras is None else extras
    n_kv_head = draw(st.integers(1, 4))
    n_head = n_kv_head * draw(st.integers(1, 3))
    explicit_head = draw(st.booleans())
    pos = draw(st.sampled_from(["learned", "sinusoidal", "rope", "alibi", "none", "relative"]))
    if explicit_head:
        d_head = 2 * draw(st.integers(1, 6))
        d_model = 2 * draw(st.integers(2, 24))
    else:
        d_head = None
        d_model = n_head * 2 * draw(st.integers(1, 4))
    norm = draw(st.sampled_from(["layernorm", "rmsnorm"]))
    ffn = draw(st.sampled_from(["explicit", "mult", "llama"]))
    ffn_fields = {
        "explicit": dict(d_ff=draw(st.integers(1, 64))),
        "mult": dict(ffn_mult=draw(st.sampled_from([1.0, 2.0, 4.0, 2.5]))),
        "llama": dict(ffn_dim_multiplier=draw(st.sampled_from([None, 1.3])),
                      ffn_multiple_of=draw(st.sampled_from([1, 8, 16]))),
    }[ffn]
    arch = draw(st.sampled_from(["decoder", "decoder", "encoder", "encoder-decoder"]))
    moe = draw(st.booleans()) or (mixed and draw(st.booleans()))  # mixed: 3 in 4 draw experts
    n_expert = draw(st.integers(1, 4)) if moe else None
    n_expert_active = draw(st.integers(1, n_expert)) if moe else None
    lm_head = arch != "encoder" or draw(st.booleans())
    head_dim = d_head if explicit_head else d_model // n_head
    placement = draw(st.sampled_from(["pre", "post", "sandwich"]))
    cross = arch != "encoder-decoder" and draw(st.integers(0, 4)) == 0
    layout_fields = dict(
        norm_placement=placement,
        parallel_block=draw(st.sampled_from(["none", "shared_norm", "two_norms"]))
        if placement == "pre" and arch != "encoder-decoder" and not cross else "none",
        attn_out_bias=draw(st.sampled_from([None, True, False])),
        qk_norm=draw(st.booleans()),
        rope_fraction=1.0 if pos != "rope" or head_dim < 4 or head_dim % 4 else draw(st.sampled_from([1.0, 0.5])),
        attn_scale=draw(st.sampled_from([None, 1.0, 0.3])),
        attn_softcap=draw(st.sampled_from([None, None, 0.5, 20.0])),
        logit_softcap=draw(st.sampled_from([None, 2.0])) if lm_head else None,
        rel_pos_buckets=draw(st.sampled_from([None, 4, 8, 12])) if pos == "relative" else None,
        rel_pos_max_distance=draw(st.sampled_from([None, 20])) if pos == "relative" else None,
        cross_attention=cross,
        position_offset=draw(st.sampled_from([0, 2])) if pos == "learned" else 0,
        lm_head_transform=lm_head and draw(st.booleans()),
        lm_head_bias=lm_head and draw(st.booleans()),
        router_norm_topk=not moe or draw(st.booleans()),
        shared_expert_d_ff=draw(st.sampled_from([None, 5, 12])) if moe else None,
        expert_capacity_factor=draw(st.sampled_from([None, None, 0.5, 1.25, 8.0])) if moe else None,
        # issue 22's dense types: Granite's multipliers, Cohere's logit scale and per-head Q/K norms, OPT-350m's
        # narrower token table
        embedding_multiplier=draw(st.sampled_from([None, 3.0])),
        residual_multiplier=draw(st.sampled_from([None, 0.5])),
        logit_scale=draw(st.sampled_from([None, 0.25])) if lm_head else None,
        embedding_dim=draw(st.sampled_from([None, None, 6])) if lm_head and arch == "decoder" else None,
    )
    layout_fields["qk_norm_per_head"] = layout_fields["qk_norm"] and draw(st.booleans())
    layout_fields["shared_expert_gate"] = layout_fields["shared_expert_d_ff"] is not None and draw(st.booleans())
    n_layer = draw(st.integers(1, 3))
    n_encoder_layer = draw(st.sampled_from([None, 1, 2])) if arch == "encoder-decoder" else None
    depth = min(n_layer, n_encoder_layer or n_layer)
    # mixed layers (tfcalc.architecture.flat): the first k dense, or every n-th MoE, the dense ones maybe wider
    pattern = draw(st.sampled_from(["none", "first", "every"])) if mixed and moe and n_layer > 1 else "none"
    layout_fields.update(
        first_dense_layers=draw(st.integers(1, depth - 1)) if pattern == "first" and depth > 1 else None,
        moe_every=draw(st.integers(2, n_layer)) if pattern == "every" else None)
    if pattern == "first" and depth == 1:
        pattern = "none"
    mixed = layout_fields["first_dense_layers"] or layout_fields["moe_every"]
    layout_fields["dense_d_ff"] = draw(st.sampled_from([None, 6, 20])) if mixed else None
    window = draw(st.sampled_from([None, None, 1, 3, 8])) if arch != "encoder" else None
    layout_fields["sliding_window"] = window
    # per-layer attention (tfcalc.architecture.patterns): chunks instead of a window, NoPE layers, a local
    # RoPE base
    chunk = draw(st.sampled_from([None, None, 1, 3])) if arch != "encoder" and window is None else None
    layout_fields["attention_chunk_size"] = chunk
    layout_fields["full_attention_every"] = draw(st.sampled_from([None, 2, 3])) if window or chunk else None
    # (NoPE layers in the mixed draws only: the activation model counts RoPE's rotated Q and K in every layer)
    layout_fields["nope_every"] = draw(st.sampled_from([None, 2])) if mixed and pos == "rope" and n_layer > 1 else None
    layout_fields["rope_local_theta"] = draw(st.sampled_from([None, 100.0])) if pos == "rope" and (
        window or chunk) else None
    kind_fields = dict(
        arch=arch,
        n_encoder_layer=n_encoder_layer,
        tie_encoder_embedding=arch != "encoder-decoder" or draw(st.booleans()),
        n_expert=n_expert,
        n_expert_active=n_expert_active,
        type_vocab_size=draw(st.integers(0, 3)) if arch != "encoder-decoder" else 0,
        embedding_norm=draw(st.booleans()),
        embedding_scale=draw(st.booleans()),
        pooler=arch == "encoder" and draw(st.booleans()),
        lm_head=lm_head,
        tie_embeddings=lm_head and draw(st.booleans()),
    )
    cfg = ModelConfig(
        n_layer=n_layer,
        d_model=d_model,
        n_head=n_head,
        n_kv_head=draw(st.sampled_from([None, n_kv_head])) if n_kv_head == n_head else n_kv_head,
        d_head=d_head,
        vocab_size=draw(st.integers(2, 97)),
        max_seq_len=draw(st.integers(1, 24)),
        pos_encoding=pos,
        norm=norm,
        final_norm=draw(st.booleans()),
        activation=draw(st.sampled_from(["gelu", "gelu_tanh", "relu", "silu"])),
        gated_ffn=draw(st.booleans()),
        attn_bias=draw(st.booleans()),
        ffn_bias=draw(st.booleans()),
        norm_bias=norm == "layernorm" and draw(st.booleans()),
        **ffn_fields,
        **kind_fields,
        **layout_fields,
    )
    return draw(_gpt_oss_and_qwen3_moe_fields(cfg, pattern == "none" and mixed_allowed)) if extras else cfg


@st.composite
def _gpt_oss_and_qwen3_moe_fields(draw, cfg: ModelConfig, listed: bool) -> ModelConfig:
    """cfg, maybe with gpt-oss's sinks, router bias and clamped SwiGLU, and (listed) Qwen3-MoE's dense layers."""
    extras = {}
    if cfg.arch != "encoder-decoder" and draw(st.integers(0, 3)) == 0:
        extras["attn_sinks"] = True
    if cfg.n_expert is not None:
        extras["router_bias"] = draw(st.booleans())
    if cfg.gated_ffn and cfg.activation == "silu" and draw(st.booleans()):
        extras.update(swiglu_limit=draw(st.sampled_from([0.05, 7.0])), swiglu_alpha=1.702)
    one_stack_moe = cfg.n_expert is not None and cfg.arch != "encoder-decoder" and cfg.n_layer > 1
    if listed and one_stack_moe and draw(st.booleans()):
        extras["dense_layers"] = [draw(st.integers(0, cfg.n_layer - 1))]
        extras["dense_d_ff"] = draw(st.sampled_from([None, 6]))
    return replace(cfg, **extras) if extras else cfg


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run tfcalc in-process: cli('params', 'gpt2') -> CliResult(code, stdout, stderr). The host reads as quiet
    (tfcalc.cli.render.host): a busy test machine's warning is not the answer a test checks (a test of the
    warning sets the load itself)."""
    monkeypatch.setattr("tfcalc.cli.render.host.load_average", lambda: 0.0)

    def invoke(*args: str) -> CliResult:
        code = run(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return invoke


@pytest.fixture
def width(monkeypatch):
    """width(n): the in-process cli's tables at n columns (COLUMNS, and render's cached console made anew)."""
    from tfcalc.cli import render

    def set_width(columns: int) -> None:
        monkeypatch.setenv("COLUMNS", str(columns))
        render.console.cache_clear()

    yield set_width
    render.console.cache_clear()


def assert_one_line_error(r: CliResult, message: str, code: int = 2) -> None:
    """The CLI's promise for bad input: nothing on stdout, one 'tfcalc: error:' line on stderr."""
    assert r.code == code
    assert r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith("tfcalc: error:"), r.err
    assert message in r.err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (transformers model, folder it was saved to), built once per case of tests/hf_tiny.py and
    module (tests/test_hf_models.py, test_hf_moe.py, test_hf_dense.py)."""
    import warnings

    from hf_tiny import build

    made = {}

    def get(name: str):
        if name not in made:
            model = build(name)
            folder = tmp_path_factory.mktemp(name)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.save_pretrained(folder)
            made[name] = model, folder
        return made[name]

    return get


@pytest.fixture(scope="session", autouse=True)
def shared_ranks():
    """torch.distributed ranks started once per test run: the launches of every test share one set of rank
    workers per rank count (tfcalc.measure.rank_pool), instead of starting, importing torch and meeting at a
    rendezvous for each launch -- most of a small distributed run's time on 2 cores. A launch whose ranks
    would see another environment, or one that fails, starts fresh ones, as outside the tests."""
    from tfcalc.measure.rank_pool import shared

    with shared():
        yield


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` run a CUDA path for real (tests/gpu/): skipped, saying why, without CUDA. torch is
    imported only when such a test was collected."""
    marked = [item for item in items if item.get_closest_marker("gpu")]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    reason = pytest.mark.skip(reason=f"gpu test: torch.cuda.is_available() is false here (torch {torch.__version__}, "
                                     f"CUDA build {torch.version.cuda or 'none'})")
    for item in marked:
        item.add_marker(reason)
