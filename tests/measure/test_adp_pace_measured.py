"""Attention-DP steps on gloo ranks (tfcalc.measure.adp_pace): each rank does its own Poisson number of work units,
then a collective over all of them, as a MoE layer is. A step lasts the slowest rank's work (adp_pace step 2:
u·max_i k_i), not the mean rank's; over the run the mean step is u·M_D(λ) (tfcalc.count.serving.adp_pace), which
the aligned model (u·λ) misses."""

import pytest

from tfcalc.count.serving import adp_pace

D, STEPS, LAM, UNIT = 4, 120, 0.6, 0.01


@pytest.fixture(scope="module")
def ranks():
    from tfcalc.measure.adp_pace import measure

    return measure(D, STEPS, LAM, UNIT)


def base_s(r: dict, counts: list) -> float:
    """The collectives' own time: the median step in which no rank had work."""
    idle = sorted(s for s, k in zip(r["step_s"], counts, strict=True) if max(k) == 0)
    return idle[len(idle) // 2]


def test_each_step_waits_for_the_slowest_rank(ranks):
    """On every rank the median step, less the collectives' time, is the slowest rank's work u·max_i k_i (within
    3 ms), and the run lasts at least the sum of the slowest ranks' work."""
    counts = ranks[0]["counts"]
    assert all(r["counts"] == counts for r in ranks)
    slowest = [UNIT * max(k) for k in counts]
    for r in ranks:
        base = base_s(r, counts)
        extra = sorted(s - base - w for s, w in zip(r["step_s"], slowest, strict=True))
        assert abs(extra[len(extra) // 2]) < 3e-3
        assert sum(r["step_s"]) > sum(slowest)


def test_mean_step_is_the_expected_maximum(ranks):
    """The mean over the run against u·M_D(λ) (the sample's maximum is a draw of it: within 20 %), and well above
    the aligned model's u·λ."""
    counts = ranks[0]["counts"]
    sample_max = sum(max(k) for k in counts) / STEPS
    assert sample_max == pytest.approx(adp_pace.expected_max(LAM, D), rel=0.2)
    for r in ranks:
        mean_step = sum(r["step_s"]) / STEPS - base_s(r, counts)
        assert mean_step == pytest.approx(UNIT * sample_max, rel=0.15, abs=1.5e-3)
        assert mean_step > 1.5 * UNIT * LAM
