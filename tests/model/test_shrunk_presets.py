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


@pytest.mark.parametrize("name", NAMES, ids=NAMES)
def test_every_preset_shrunk_builds_and_runs_a_forward(name):
    narrow = small_widths(load(name), 1)
    B, T = 2, 8
    for depth in (1, 2, 3):
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
