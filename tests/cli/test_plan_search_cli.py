"""`tfcalc plan`'s search on the command line: what it chose beyond tp, pp and dp is named on the chosen
layout's line and in the notes; --json gains search.varied and search.offload_needed."""

from conftest import assert_one_line_error


def test_json_says_what_the_search_varied(cli):
    j = cli("plan", "llama2-13b", "--gpus", "32", "--global-batch", "256", "--json").json()
    varied = j["search"]["varied"]
    assert varied["fsdp_variants"] and varied["offload"] and varied["micro_batch"] and not varied["compute_dtype_fp8"]
    assert j["search"]["offload_needed"] is False and j["layout"]["offload"] == []
    fixed = cli("plan", "llama2-13b", "--gpus", "32", "--global-batch", "256", "--zero", "3", "--hsdp", "4",
                "--offload", "optimizer", "--micro-batch", "1", "--json").json()["search"]
    assert not any(fixed["varied"][k] for k in ("fsdp_variants", "offload", "micro_batch"))
    assert all(c["layout"]["hsdp"] == 4 and c["layout"]["offload"] == ["optimizer"] for c in fixed["layouts"])


def test_offload_where_nothing_fits_is_said(cli):
    r = cli("plan", "llama2-70b", "--gpus", "8", "--global-batch", "64")
    assert r.code == 0, r.err
    chosen = next(line for line in r.out.splitlines() if line.startswith("llama2-70b: tp"))
    assert "optimizer and activations offloaded" in chosen  # the chosen layout's line names it
    assert "without offload, so the search tried offload" in " ".join(r.out.split())
    j = cli("plan", "llama2-70b", "--gpus", "8", "--global-batch", "64", "--json").json()
    assert j["search"]["offload_needed"] is True and j["layout"]["offload"]
    assert any("search tried offload" in n for n in j["notes"])


def test_an_offload_given_is_not_the_searchs_choice(cli):
    j = cli("plan", "llama2-70b", "--gpus", "8", "--global-batch", "64", "--offload", "optimizer", "--json").json()
    assert j["layout"]["offload"] == ["optimizer"] and j["search"]["offload_needed"] is False
    assert not any("search tried offload" in n for n in j["notes"])


def test_nothing_fits_even_with_offload_is_one_line(cli):
    assert_one_line_error(cli("plan", "llama2-70b", "--micro-batch", "512", "--global-batch", "1024"),
                          "(with offload too)")


def test_help_says_fp8_is_the_users_choice(cli):
    out = " ".join(cli("plan", "--help").out.replace("│", " ").split())
    assert "never picks FP8" in out


def test_no_layout_of_n_gpus_even_with_offload_is_one_line(cli):
    assert_one_line_error(cli("plan", "llama2-70b", "--gpus", "1", "--global-batch", "64"),
                          "no layout of 1 GPUs fits llama2-70b")
    r = cli("plan", "llama2-70b", "--gpus", "1", "--global-batch", "64")
    assert "(with offload too)" in r.err
    r = cli("plan", "llama2-70b", "--gpus", "1", "--global-batch", "64", "--offload", "optimizer")
    assert r.code == 2 and "(with offload too)" not in r.err  # the offload given: nothing else tried


def test_hsdp_and_no_reshard_given_to_a_search(cli):
    """Given, they are the search's (ZeRO-3 only); with another ZeRO stage, or an HSDP no dp can take, one
    line at once (before: the floor's 'no tensor-parallel degree splits', its layout being refused)."""
    j = cli("plan", "llama2-70b", "--gpus", "auto", "--hsdp", "4", "--json").json()
    assert all(c["layout"]["hsdp"] == 4 and c["layout"]["zero"] == 3 for c in j["search"]["layouts"])
    j = cli("plan", "llama2-70b", "--gpus", "auto", "--no-reshard-after-forward", "--json").json()
    assert all(not c["layout"]["reshard_after_forward"] for c in j["search"]["layouts"])
    assert_one_line_error(cli("plan", "llama2-70b", "--gpus", "auto", "--zero", "1", "--hsdp", "2"), "needs --zero 3")
    assert_one_line_error(cli("plan", "llama2-70b", "--gpus", "64", "--zero", "2", "--no-reshard-after-forward"),
                          "needs --zero 3")
    assert_one_line_error(cli("plan", "llama2-70b", "--gpus", "auto", "--hsdp", "3"), "no dp does")
