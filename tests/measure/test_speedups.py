"""The speed-ups of counting on meta (tfcalc.measure.speedups) change no count and leave torch as it was."""

import subprocess
import sys

import pytest
import torch
from conftest import BERT_LIKE, MIXTRAL_LIKE, VASWANI_LIKE, tiny

from tfcalc.measure import flops as measured, speedups
from tfcalc.workload import Workload

KINDS = {"gpt2-like": {}, "bert-like": BERT_LIKE, "vaswani-like": VASWANI_LIKE, "mixtral-like": MIXTRAL_LIKE,
         "alibi": dict(pos_encoding="alibi"), "gqa-rope": dict(n_kv_head=2, pos_encoding="rope")}


@pytest.mark.parametrize("kind", KINDS, ids=list(KINDS))
def test_the_op_cache_changes_no_count_forward_or_training(kind, monkeypatch):
    cfg = tiny(**KINDS[kind])
    fast = measured.measure_flops(cfg, Workload(batch=2, seq=12), training=True)
    monkeypatch.setattr(measured, "fast_meta", lambda device: speedups.numpy_absent_fast())  # no cache, no stand-in
    plain = measured.measure_flops(cfg, Workload(batch=2, seq=12), training=True)
    assert fast == plain


def test_the_cache_runs_repeated_ops_once_and_every_op_is_still_counted():
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.empty(4, 8, device="meta")
    w = torch.empty(8, 8, device="meta")
    with speedups.MetaOpCache() as cache, FlopCounterMode(display=False) as counter:
        outs = [torch.nn.functional.gelu(x @ w) for _ in range(5)]
        y = x.t()  # a view: never cached
    assert counter.get_total_flops() == 5 * 2 * 4 * 8 * 8
    assert cache.misses == 2 and cache.hits == 8  # mm and gelu ran once each
    assert all(o.shape == (4, 8) and o.is_meta and o.dtype == x.dtype for o in outs)
    assert y._base is x  # views keep aliasing


def test_in_place_and_view_ops_are_not_cached():
    assert not speedups._creates_fresh_tensors(torch.ops.aten.add_.Tensor)
    assert not speedups._creates_fresh_tensors(torch.ops.aten.transpose.int)
    assert not speedups._creates_fresh_tensors(torch.ops.aten.add.out)
    assert speedups._creates_fresh_tensors(torch.ops.aten.addmm.default)


def test_cache_keys_tell_layouts_apart():
    a = torch.empty(4, 6, device="meta")
    assert speedups._key(a) != speedups._key(a.t().contiguous().t())  # same shape, other strides
    assert speedups._key([a, 2, None]) == speedups._key([torch.empty(4, 6, device="meta"), 2, None])
    with pytest.raises(speedups._Uncacheable):
        speedups._key(object())


def test_counting_on_meta_imports_no_dynamo_and_leaves_torch_as_it_was():
    """In a fresh interpreter: the count runs without importing torch._dynamo (the stand-in answers), any
    other use of the stand-in imports the real module, and afterwards torch.compile works."""
    code = (
        "import sys, torch\n"
        "from tfcalc.measure import speedups\n"
        "from tfcalc.measure.flops import measure_flops\nfrom tfcalc.workload import Workload\n"
        "from tfcalc.config import ModelConfig\n"
        "cfg = ModelConfig(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=16)\n"
        "measure_flops(cfg, Workload(batch=1, seq=8), training=True)\n"
        "assert 'torch._dynamo' not in sys.modules and '_dynamo' not in torch.__dict__\n"
        "with speedups.no_dynamo_import():\n"
        "    stand_in = sys.modules['torch._dynamo']\n"
        "    assert stand_in.disable(len) is len\n"
        "    assert callable(stand_in.reset)  # not the stand-in's: the real module's, imported on demand\n"
        "    assert sys.modules['torch._dynamo'] is not stand_in\n"
        "import torch._dynamo\n"
        "assert torch._dynamo.__file__\n"
        "f = torch.compile(lambda x: x * 2 + 1, backend='eager')\n"
        "assert f(torch.ones(2)).tolist() == [3.0, 3.0]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_the_stand_in_is_used_only_while_the_private_wrapper_reads_as_expected(monkeypatch):
    """lazy_disable_matches reads torch/_compile.py's _disable_dynamo: the real one matches; a missing
    one, or one that caches its answer elsewhere (a changed release), does not."""
    import torch._compile

    assert speedups.lazy_disable_matches()
    original = torch._compile._disable_dynamo

    def changed(fn=None, recursive=True):
        return original(fn, recursive)

    monkeypatch.setattr(torch._compile, "_disable_dynamo", changed)
    assert not speedups.lazy_disable_matches()
    monkeypatch.delattr(torch._compile, "_disable_dynamo")
    assert not speedups.lazy_disable_matches()


def test_a_changed_private_wrapper_takes_the_plain_path_with_the_same_count():
    """In a fresh interpreter: the count with the stand-in, then with torch's _disable_dynamo replaced by
    one the stand-in does not know: no stand-in is installed, the real torch._dynamo is imported (the
    plain path), and the count is the same, forward and training."""
    code = (
        "import sys, torch, torch._compile\n"
        "from tfcalc.measure import speedups\n"
        "from tfcalc.measure.flops import measure_flops\nfrom tfcalc.workload import Workload\n"
        "from tfcalc.config import ModelConfig\n"
        "cfg = ModelConfig(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=16)\n"
        "fast = measure_flops(cfg, Workload(batch=1, seq=8), training=True)\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "original = torch._compile._disable_dynamo\n"
        "def changed(fn=None, recursive=True):\n"
        "    return original(fn, recursive)\n"
        "torch._compile._disable_dynamo = changed\n"
        "with speedups.no_dynamo_import():\n"
        "    assert 'torch._dynamo' not in sys.modules  # no stand-in\n"
        "plain = measure_flops(cfg, Workload(batch=1, seq=8), training=True)\n"
        "assert 'torch._dynamo' in sys.modules and sys.modules['torch._dynamo'].__file__  # the real one\n"
        "assert plain == fast, (plain, fast)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_numpy_absent_fast_blocks_the_import_only_inside_and_only_without_numpy(monkeypatch):
    """Without numpy: `import numpy` fails at once inside (the documented None entry of sys.modules) and the
    entry is gone after; with numpy installed the context changes nothing."""
    import importlib.util

    with speedups.numpy_absent_fast():
        assert sys.modules.get("numpy", 0) is not None  # numpy installed here: nothing blocked
    monkeypatch.delitem(sys.modules, "numpy", raising=False)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else find_spec(name, *a))
    with speedups.numpy_absent_fast():
        with pytest.raises(ModuleNotFoundError):
            import numpy  # noqa: F401 -- the import under test
    assert "numpy" not in sys.modules
