"""HSDP run for real: FSDP2 on a 2-D (replicate 2, shard 2) mesh of 4 gloo ranks -- the plan's model states and
every collective (gathers and reduce-scatters in the shard group, all-reduces across the replicas) agree
exactly. The one 4-rank run of the suite."""

from conftest import tiny

from tfcalc.count.training.layout import Layout
from tfcalc.count.training.steptime import Hardware
from tfcalc.report.plan_check import check_plan

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)
CFG = tiny(n_kv_head=2, d_ff=40, pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True,
           activation="silu", attn_bias=False, ffn_bias=False)


def test_hsdp_on_four_ranks_agrees_with_the_plan():
    layout = Layout(tp=1, pp=1, dp=4, seq=16, global_batch=8, micro_batch=1, zero=3, hsdp=2)
    check = check_plan(CFG, layout, 4, H100, None)
    assert check.layout.hsdp == 2 and not check.left_out
    assert check.states_exact and check.collectives_exact
    groups = {(c["cause"], c["op"]): c["group"] for c in check.collectives}
    assert groups == {("zero_params", "all_gather"): "dp_shard", ("dp_grads", "reduce_scatter"): "dp_shard",
                      ("dp_grads", "all_reduce"): "dp_replicate"}
