"""plan --dropout against Korthikanti et al. 2022, Table 2 (16-bit, scores materialized): dropout adds, per
layer, the attention probabilities' mask and dropped output (a·s²·b bytes + 2·a·s²·b) and the two h-wide masks
after attention and after the MLP (s·b·h each): 3·a·s²·b + 2·s·b·h bytes."""

import pytest

import tfcalc
from tfcalc.errors import InputError

TINY = dict(n_layer=3, d_model=64, n_head=4, vocab_size=128, max_seq_len=32)


def activation_bytes(**kw) -> int:
    r = tfcalc.plan("gpt2", dp=1, global_batch=2, micro_batch=2, seq=32, attention="math", **kw, **TINY)
    return r.to_json()["per_rank"]["activation_bytes"]


def test_dropout_adds_the_masks_and_the_dropped_probabilities():
    L, a, s, b, h = 3, 4, 32, 2, 64
    assert activation_bytes(dropout=True) - activation_bytes() == L * (3 * a * s * s * b + 2 * s * b * h)


def test_dropout_reaches_the_cli(cli):
    args = ["plan", "gpt2", "--dp", "1", "--global-batch", "2", "--micro-batch", "2", "--seq", "32", "--attention",
            "math", "--json", *[x for k, v in TINY.items() for x in ("--set", f"{k}={v}")]]
    on, off = cli(*args, "--dropout"), cli(*args)
    assert on.code == off.code == 0, on.err
    assert on.json()["per_rank"]["activation_bytes"] == activation_bytes(dropout=True)
    assert off.json()["per_rank"]["activation_bytes"] == activation_bytes()


def test_dropout_must_be_a_switch():
    with pytest.raises(InputError, match="dropout must be True or False"):
        activation_bytes(dropout="yes")
