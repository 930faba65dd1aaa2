"""The registry answers which kind fills the local layers and which builds a kind's own per-layer pattern
(tfcalc.architecture.kinds: ``local_field``, ``layer_plan``, ``empty``): softmax attention's rules, the layer
pattern and the flat front end ask it, and name no other kind's field or class.

Checked two ways: an AST scan of tfcalc/architecture (no module but the kind's own names gated DeltaNet's
``linear_mixer`` or Mamba2's ``hybrid_pattern``, ``hybrid_with_ffn`` and ``NoMixer`` in code; docstrings may), and
a kind defined in this file alone that fills the local layers through a field of its own, which the layer
pattern, softmax attention's rules and the count then follow."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
from test_mixer_plugin import ToyLinearAttention

from tfcalc.architecture import kinds
from tfcalc.architecture.patterns import layer_kind
from tfcalc.config import from_mapping
from tfcalc.count.model import params as count_params
from tfcalc.errors import InputError

ARCH = Path(__file__).resolve().parents[2] / "tfcalc" / "architecture"
OWNED = {"linear_mixer": "gated_deltanet.py", "hybrid_pattern": "mamba2.py", "hybrid_with_ffn": "mamba2.py",
         "NoMixer": "mamba2.py"}


def _named_in_code(tree: ast.Module) -> set[str]:
    """Names, attributes, keywords and strings of a module, docstrings left out."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.alias):
            out.add(n.name.rsplit(".", 1)[-1])
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            out.update(w.strip("'\"`,.():") for w in n.value.split())
    return out


@pytest.mark.parametrize("path", sorted(ARCH.glob("*.py")), ids=lambda p: p.name)
def test_no_module_names_another_kinds_field_or_class(path):
    named = _named_in_code(ast.parse(path.read_text()))
    foreign = sorted(word for word, owner in OWNED.items() if word in named and path.name != owner)
    assert not foreign, f"{path.name} names {foreign}: ask tfcalc.architecture.kinds"


@dataclass(frozen=True)
class ToyFields:
    toy_local: Optional[str] = None  # given: the toy fills the local layers


TOY = kinds.MixerKind("toy local filler", ToyFields, lambda cfg, i, causal: ToyLinearAttention(cfg.d_model, 2, 8),
                      claims=lambda cfg, layer: cfg.toy_local is not None and layer is not None and layer.local,
                      local_field="toy_local", group="toy (tests)")


@pytest.fixture
def toy():
    kinds.register(TOY)
    yield
    kinds.unregister(TOY.name)


BASE = {"n_layer": 4, "d_model": 32, "n_head": 4, "vocab_size": 61, "max_seq_len": 16, "norm": "rmsnorm",
        "pos_encoding": "rope", "attn_bias": False}


def test_a_kind_that_fills_the_local_layers_is_asked_not_named(toy):
    # full_attention_every without a window: the toy's field stands in for it (no window, no chunk given)
    cfg = from_mapping({**BASE, "full_attention_every": 2, "toy_local": "yes"})
    assert kinds.local_filler(cfg) is TOY and "toy_local" in kinds.local_fields()
    assert [layer_kind(cfg, i).local for i in range(4)] == [True, False, True, False]
    mixers = [type(b.mixer).__name__ for b in cfg.architecture.output.layers()]
    assert mixers == ["ToyLinearAttention", "Attention"] * 2
    # 2 toy layers of Q, K, V, O (d -> 2·8 and back) and 2 attention layers of 4·d² (RMSNorm, no biases)
    d = 32
    by_mixer = sum(n for c, n in count_params.breakdown(cfg).items() if c.startswith("attn_") and "norm" not in c)
    assert by_mixer == 2 * 4 * d * 16 + 2 * 4 * d * d
    # without it, softmax attention's rule stands and offers every kind's field
    with pytest.raises(InputError, match="layer_pattern has 'local' layers: give sliding_window or "
                                         "attention_chunk_size .*, or linear_mixer, or toy_local$"):
        from_mapping({**BASE, "layer_pattern": "(local, full)*2"})


def test_a_kinds_own_pattern_builds_through_the_registry():
    """Nemotron-H's letters reach flat.py as LayerSlots from the Mamba2 kind; its empty mixer from the registry."""
    cfg = from_mapping({**BASE, "hybrid_pattern": "M-*E", "ssm_heads": 4, "ssm_head_dim": 8, "ssm_state_size": 16,
                        "n_expert": 4, "n_expert_active": 2, "d_ff": 64})
    plan = kinds.layer_plan(cfg)
    assert [(s.mixer, s.ffn) for s in plan] == [("mamba", "none"), (None, "dense"), ("", "none"), (None, "moe")]
    blocks = list(cfg.architecture.output.layers())
    assert [type(b.mixer).__name__ for b in blocks] == ["Mamba2", "NoMixer", "Attention", "NoMixer"]
    assert [b.is_moe for b in blocks] == [False, False, False, True]
    assert type(kinds.empty_mixer(32)).__name__ == "NoMixer"
    assert kinds.layer_plan(from_mapping(BASE)) is None
