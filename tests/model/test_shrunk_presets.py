"""Every preset shrunk on its description (Architecture.shrunk, tfcalc.architecture.copies) to 1, 2 and 3
layers, at the small copy's tiny widths (tfcalc.report.small_copy.small_widths): the model builds from the
shrunk description (build_model(cfg, arch=...)), runs a forward on the CPU to finite outputs of the right
shape, holds exactly the parameters the count gives for the flat fields written back from the copy
(tfcalc.config_copies), and rebuilds from those fields alone, so a measured run of any preset at reduced depth
works."""

import pytest
import torch

from tfcalc.config import from_mapping
from tfcalc.config_copies import with_architecture
from tfcalc.count.model.params import total
from tfcalc.measure.params import measured_total
from tfcalc.model import build_model
from tfcalc.presets import load, preset_names
from tfcalc.report.small_copy import small_widths

NAMES = preset_names()


def _depths(cfg) -> tuple[int, ...]:
    """1, 2 and 3 layers; a model of shortcut pairs (LongCat-Flash: two sub-layers a layer, moe_shortcut) 2, 4 and 6,
    an odd depth refused in one line (test_an_odd_depth_of_shortcut_pairs_is_refused)."""
    return (2, 4, 6) if cfg.moe_shortcut else (1, 2, 3)


@pytest.mark.parametrize("name", NAMES, ids=NAMES)
def test_every_preset_shrunk_builds_and_runs_a_forward(name):
    narrow = small_widths(load(name), 1)
    B, T = 2, 8
    for depth in _depths(narrow):
        arch = narrow.architecture.shrunk(depth, 1)
        copy = with_architecture(narrow, arch)
        assert [s.n_layer for s in arch.stacks] == [min(depth, s.n_layer) if s.name != "encoder" else 1
                                                    for s in narrow.architecture.stacks]
        torch.manual_seed(0)
        model = build_model(narrow, "cpu", arch=arch)
        assert measured_total(model) == total(copy)
        assert from_mapping({f: getattr(copy, f) for f in copy.__dataclass_fields__}) == copy
        idx = torch.randint(0, narrow.vocab_size, (B, T))
        with torch.no_grad():
            if narrow.arch == "encoder-decoder":
                out = model(torch.randint(0, narrow.vocab_size, (B, T)), idx)
            else:
                out = model(idx)
        out = out[0] if isinstance(out, tuple) else out  # BERT: (output, pooled)
        assert out.shape[:2] == (B, T) and out.shape[2] in (narrow.vocab_size, narrow.d_model)
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", NAMES, ids=NAMES)
def test_every_preset_at_reduced_depth_builds_as_the_commands_make_it(name):
    """Issue 29: "a measured run of any preset shrunk by --set n_layer=... or --n-layer works". On meta (no
    storage: the full widths stay cheap), at 1, 2 and 3 layers: `memory/infer/bench NAME --set n_layer=N`'s
    config (tfcalc.presets: where the depth pattern's fields refuse the new depth as written -- Llama 4's
    nope_every 4, DeepSeek-V3's first_dense_layers 3 -- the copy made on the description), `bench NAME --n-layer
    N`'s copy (tfcalc.report.bench), and the measured memory run's warm-up copy of each
    (tfcalc.measure.memory._warmup_config) build; each config rebuilds from its flat fields alone (what a
    measuring child process receives) to the same description, of N decoder layers."""
    from tfcalc.config_copies import with_architecture as written_back
    from tfcalc.measure.memory import _warmup_config

    cfg = load(name)
    for n in _depths(cfg):
        set_depth = load(name, [f"n_layer={n}"])
        bench_copy = written_back(cfg, cfg.architecture.shrunk(min(n, cfg.n_layer)))
        for copy in (set_depth, bench_copy):
            assert copy.architecture.output.n_layer == min(n, cfg.n_layer) if copy is bench_copy else n
            rebuilt = from_mapping({f: getattr(copy, f) for f in copy.__dataclass_fields__})
            assert rebuilt == copy and rebuilt.architecture == copy.architecture
            build_model(copy, "meta")
            small, arch = _warmup_config(copy)
            build_model(small, "meta", arch=arch)


def test_a_depth_pattern_the_user_writes_is_still_checked_as_written():
    """Only the depth alone is shrunk on the description: a pattern field the user sets beside it is the user's
    own, and its refusal stands (one line naming the field); a depth the pattern allows is taken as written."""
    from tfcalc.errors import InputError

    with pytest.raises(InputError, match="field 'nope_every' \\(4\\) must be at most n_layer \\(2\\)"):
        load("llama-4-scout", ["n_layer=2", "nope_every=4"])
    with pytest.raises(InputError, match="'first_dense_layers' \\(3\\) must be less than the depth \\(2\\)"):
        load("deepseek-v3", ["n_layer=2", "first_dense_layers=3"])
    assert load("llama-4-scout", ["n_layer=8"]).nope_every == 4  # allowed as written: not rewritten
    shallow = load("llama-4-scout", ["n_layer=2"])
    assert [b.mixer.chunk for b in shallow.architecture.output.layers()] == [8192, None]  # a chunked, a NoPE layer


def test_an_odd_depth_of_shortcut_pairs_is_refused():
    """LongCat-Flash's blocks come in pairs (the first's MoE joins the second's output): 3 sub-layers is no model; both
    ways to ask for it answer in one line."""
    from tfcalc.errors import InputError

    with pytest.raises(InputError, match="shortcut MoE .* has no next layer to join"):
        load("longcat-flash-chat", ["n_layer=3"])
    with pytest.raises(InputError, match="shortcut MoE .* has no next layer to join"):
        load("longcat-flash-chat").architecture.shrunk(3)
