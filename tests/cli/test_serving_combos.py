"""The serving options of issue 31 together (`infer --context-chunking`, `--cached-prefix`, `--max-batch`,
`--disaggregate`, `--ep-comm`, `--adp-balance`), each pair of them under --rate and --concurrency, on a dense, an MoE
and an attention-free model, through the command line and tfcalc.infer: every combination either answers with each
option's JSON key present and saying what was asked (no option silently dropped), or is refused in one line. Then
the combinations a review found broken, and hostile values of each option. No figure is checked here: each option's
arithmetic has its own tests (tests/count/test_*.py)."""

from __future__ import annotations

import itertools
import json

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.errors import InputError

LOAD = ("--device-spec", "h100-sxm", "--mean-input", "1024", "--mean-output", "128")


def _continuous(j: dict) -> dict:
    return j["continuous"] or {}


# option -> (its arguments, what the JSON must then say)
OPTIONS = {
    "context_chunking": (("--context-chunking", "off"), lambda j: _continuous(j)["context_chunking"] == "off"),
    "cached_prefix": (("--cached-prefix", "512"), lambda j: j["cached_prefix"] == 512
                      and _continuous(j)["cached_tokens"] == 512),
    "max_batch": (("--max-batch", "32"), lambda j: _continuous(j)["max_batch"] == 32),
    "trtllm_bench": (("--max-batch", "trtllm-bench"), lambda j: _continuous(j)["engine_settings"]["engine"]
                     == "trtllm-bench" and _continuous(j)["max_batch"]
                     == _continuous(j)["engine_settings"]["max_batch_size"]),
    "disaggregate": (("--disaggregate", "1:1"), lambda j: j["disaggregated"]["prefill_instances"] == 1
                     and j["disaggregated"]["decode_instances"] == 1),
    "ep_comm": (("--ep-comm", "allgather"), lambda j: j["expert_parallel"]["ep_comm"]["method"] == "allgather"),
    "adp_balance": (("--adp-balance", "on"), lambda j: _continuous(j)["attention_dp_pace"]["balance"] == "on"),
}
PAIRS = [p for p in itertools.combinations(OPTIONS, 2) if set(p) != {"max_batch", "trtllm_bench"}]
SERVERS = {  # a dense model on one GPU, an MoE over 4 GPUs with attention DP, a dense one over --tp 2
    "llama3-8b": (), "qwen3-30b-a3b --ep 4": ("--ep", "4"), "llama3-8b --tp 2": ("--tp", "2")}
LOADS = {"rate": ("--rate", "2"), "concurrency": ("--concurrency", "8", "--lengths", "random")}


def answers_or_refuses(r, names) -> None:
    """Exit 0 with every named option's key saying what was asked, or one 'tfcalc: error:' line."""
    if r.code != 0:
        assert_one_line_error(r, "")
        return
    j = r.json()
    for name in names:
        assert OPTIONS[name][1](j), (name, r.out[:200])


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("pair", PAIRS, ids="+".join)
def test_each_pair_answers_with_both_or_refuses(cli, server, load, pair):
    model = server.split()[0]
    args = [a for name in pair for a in OPTIONS[name][0]]
    answers_or_refuses(cli("infer", model, *LOAD, *LOADS[load], *SERVERS[server], *args, "--json"), pair)


@pytest.mark.parametrize("names", [
    ("context_chunking", "cached_prefix", "trtllm_bench"), ("cached_prefix", "ep_comm", "adp_balance", "max_batch"),
    ("disaggregate", "ep_comm", "adp_balance"), ("max_batch", "context_chunking", "adp_balance", "cached_prefix")],
    ids="+".join)
def test_several_at_once_answer_with_each(cli, names):
    """The options three and four at a time on the MoE over --ep 4, in the JSON all at once."""
    args = [a for name in names for a in OPTIONS[name][0]]
    r = cli("infer", "qwen3-30b-a3b", *LOAD, "--rate", "2", "--ep", "4", *args, "--json")
    assert r.code == 0, r.err
    for name in names:
        assert OPTIONS[name][1](r.json()), name


@pytest.mark.parametrize("model", ["llama3-8b", "qwen3-30b-a3b", "falcon-mamba-7b"])
@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_tables_and_csv_of_the_options_together(cli, width, model, fmt):
    width(200)
    extra = ("--ep", "4", "--adp-balance", "on") if model == "qwen3-30b-a3b" else ()
    r = cli("infer", model, *LOAD, "--rate", "2", "--cached-prefix", "512", "--context-chunking", "off",
            *extra, "--format", fmt)
    assert r.code == 0 and r.err == "" and r.out.strip()
    r = cli("infer", model, *LOAD, "--rate", "2", "--disaggregate", "1:1", "--format", fmt)
    assert r.code == 0 and r.err == "" and r.out.strip()


def test_the_api_answers_as_the_command_line(cli):
    """tfcalc.infer's keywords give the JSON the flags give."""
    r = cli("infer", "qwen3-30b-a3b", *LOAD, "--rate", "2", "--ep", "4", "--cached-prefix", "512", "--ep-comm",
            "allgather", "--adp-balance", "on", "--max-batch", "trtllm-bench", "--json")
    api = tfcalc.infer("qwen3-30b-a3b", device_spec="h100-sxm", mean_input=1024, mean_output=128, rate=2, ep=4,
                       cached_prefix=512, ep_comm="allgather", adp_balance=True, max_batch="trtllm-bench")
    assert json.loads(json.dumps(api.to_json())) == r.json()


# the combinations a review found broken (each was exit 0 with the option ignored, or an internal error)
@pytest.mark.parametrize("args, message", [
    (("--ep", "4", "--adp-balance", "on", "--seq", "1024"), "--adp-balance paces the attention-DP groups' prompts "
     "under load"),  # was: exit 0, no pace anywhere
    (("--ep", "4", "--tp", "4", "--adp-balance", "on", "--rate", "2", *LOAD), "with one group"),  # D = 1: was ignored
    (("--ep", "4", "--adp-balance", "on", "--rate", "2", "--prefill-chunk", "0", *LOAD), "--prefill-chunk 0"),
    (("--ep", "4", "--tp", "4", "--ep-comm", "allgather", "--rate", "2", *LOAD), "--ep-comm allgather"),
    (("--max-batch", "8", "--seq", "1024"), "give --rate R"),  # named --concurrency, which then refused it
])
def test_combinations_that_were_ignored_are_refused(cli, args, message):
    if "--mean-input" not in args:
        args = ("--device-spec", "h100-sxm", *args)
    r = cli("infer", "qwen3-30b-a3b", *args, "--json")
    assert_one_line_error(r, message)
    if "--max-batch" in args:
        assert "--concurrency" not in r.err  # which refuses --max-batch too


def test_trtllm_bench_on_an_attention_free_model_is_one_line(cli):
    """falcon-mamba-7b has no KV heads for trtllm-bench's cache per token: was an internal TypeError."""
    r = cli("infer", "falcon-mamba-7b", *LOAD, "--rate", "2", "--max-batch", "trtllm-bench", "--json")
    assert_one_line_error(r, "no attention KV heads")
    r = cli("infer", "falcon-mamba-7b", *LOAD, "--rate", "2", "--max-batch", "64", "--cached-prefix", "512", "--json")
    assert r.code == 0 and _continuous(r.json())["max_batch"] == 64


HOSTILE = ["-1", "0", str(10**30), "1.5", "1:0", " 2:2 :", "١٢", "１:２", "²", "[red]x[/red]", "", "nan", "inf",
           "maybe", "1:1:1", "-1:2", "0:1"]
FLAGS = {"--context-chunking": (), "--cached-prefix": (), "--max-batch": (), "--disaggregate": (),
         "--ep-comm": ("--ep", "4"), "--adp-balance": ("--ep", "4")}
VALID = {"--cached-prefix": {"0"}}  # no prefix cached: a valid count


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_on_the_command_line(cli, flag, value):
    if value in VALID.get(flag, ()):
        pytest.skip("a valid value of this flag")
    r = cli("infer", "qwen3-30b-a3b", *LOAD, "--rate", "2", *FLAGS[flag], flag, value, "--json")
    assert_one_line_error(r, flag)
    assert "[red]" not in r.err or "'[red]x[/red]'" in r.err  # shown quoted, never as markup


@pytest.mark.parametrize("keyword, value", [
    ("max_batch", 10**30), ("max_batch", "١٢"), ("max_batch", -1), ("max_batch", True), ("max_batch", 2.0),
    ("disaggregate", "١:١"), ("disaggregate", f"{10**30}:1"), ("disaggregate", "1:0"), ("disaggregate", (1, 1)),
    ("cached_prefix", -16), ("cached_prefix", 10**30), ("cached_prefix", 1.5), ("cached_prefix", "512"),
    ("context_chunking", "maybe"), ("context_chunking", True), ("ep_comm", None), ("ep_comm", "[red]x[/red]"),
    ("adp_balance", "on"), ("adp_balance", 1)])
def test_hostile_values_through_the_api(keyword, value):
    kw = {"ep": 4} if keyword in ("ep_comm", "adp_balance") else {}
    with pytest.raises(InputError) as e:
        tfcalc.infer("qwen3-30b-a3b", device_spec="h100-sxm", mean_input=1024, mean_output=128, rate=2, **kw,
                     **{keyword: value})
    assert "\n" not in str(e.value) and keyword in str(e.value)
