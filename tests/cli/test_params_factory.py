"""`tfcalc params pkg.module:factory` (issue 32): any nn.Module from the command line, its tree and counts;
every bad factory one line and exit 2."""

from __future__ import annotations

import itertools

import pytest
from conftest import assert_one_line_error

SOURCE = '''
import torch
from torch import nn

class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.block = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        self.head = nn.Linear(32, 100, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(self.block(self.emb(x)))

def model():
    return Tied(), (torch.zeros(2, 16, dtype=torch.long),)

def bare():
    return Tied()

def boom():
    raise ValueError("no GPU here")

def number():
    return 3

def bad_inputs():
    return Tied(), 7

def crashes():
    return Tied(), (torch.zeros(2, 16),)

def weird():
    m = nn.Module()
    m.add_module("[bold red]x[/bold red]", nn.Linear(4, 4))
    m.add_module("esc\\x1b[31m", nn.Linear(4, 4))
    return m

NOT_CALLABLE = 5
'''
_names = itertools.count()


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A module of factories, importable from the folder tfcalc runs in, under a fresh name each test."""
    name = f"factories_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_factory_is_counted_like_the_api(cli, package):
    import tfcalc

    r = cli("params", f"{package}:model", "--json")
    assert r.code == 0, r.err
    data = r.json()
    # the embedding 100·32 (the head is its tensor), one encoder layer 8,544 (in_proj 3,168, out_proj 1,056,
    # linear1 2,112, linear2 2,080, two norms 128)
    assert data["params"] == data["empirical_total"] == 3200 + 8544
    module = __import__(package).model()
    assert data["modules"] == tfcalc.inspect(module[0], *module[1]).to_json()["modules"]
    assert data["forward_flops"] > 0 and data["saved_activation_bytes"] > 0


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
def test_the_tree_is_on_screen_at_any_width(cli, package, monkeypatch, columns, width):
    width(columns)
    r = cli("params", f"{package}:model")
    assert r.code == 0, r.err
    words = " ".join(r.out.split())
    assert "11,744 parameters" in words and "(all)" in r.out and "self_attn" in r.out


def test_without_inputs_only_parameters(cli, package):
    data = cli("params", f"{package}:bare", "--json").json()
    assert data["params"] == 11_744 and data["forward_flops"] is None
    assert "no example inputs" in " ".join(cli("params", f"{package}:bare").out.split())


def test_markup_and_escapes_in_module_names_are_shown_as_typed(cli, package):
    r = cli("params", f"{package}:weird")
    assert r.code == 0 and "[bold red]x[/bold red]" in r.out and "\x1b" not in r.out


@pytest.mark.parametrize("factory, message", [
    ("boom", "the factory raised ValueError: no GPU here"),
    ("number", "the factory returned 3, not a torch.nn.Module"),
    ("bad_inputs", "the example inputs must be a tuple"),
    ("crashes", "Tied's forward on the example inputs raised RuntimeError"),
    ("absent", "has no 'absent'"),
    ("NOT_CALLABLE", "NOT_CALLABLE is 5, not a function"),
])
def test_bad_factories_are_one_line(cli, package, factory, message):
    assert_one_line_error(cli("params", f"{package}:{factory}"), message)


def test_a_path_that_does_not_import(cli, package):
    assert_one_line_error(cli("params", "no_such_package.models:build"), "cannot import no_such_package.models")
    assert_one_line_error(cli("params", f"{package}:model", "--set", "n_layer=2"), "a factory builds its module")
    assert_one_line_error(cli("params", f"{package}:model", "gpt2"), "not both: gpt2 is a config")
