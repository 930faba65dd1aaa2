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
    """The mean over the run: the slowest rank's work each step, as it lasted (a loaded machine wakes a sleeping
    rank late, by as much as the tolerance: the work's own seconds, not u·k, are what the step waits for); its
    counts' mean maximum against M_D(λ) (the sample is a draw of it: within 20 %); well above the aligned model's
    u·λ. Within 3 ms, as each step is: a rank that waits in gloo's collective wakes later than one that finds
    the others there, which the idle steps' collective time (base_s) does not hold."""
    counts, works = ranks[0]["counts"], ranks[0]["work_s"]
    sample_max = sum(max(k) for k in counts) / STEPS
    assert sample_max == pytest.approx(adp_pace.expected_max(LAM, D), rel=0.2)
    slowest_work = sum(max(w) for w in works) / STEPS
    assert slowest_work >= UNIT * sample_max * 0.99  # a sleep lasts at least as asked
    for r in ranks:
        mean_step = sum(r["step_s"]) / STEPS - base_s(r, counts)
        assert mean_step == pytest.approx(slowest_work, rel=0, abs=3e-3)
        assert mean_step > 1.5 * UNIT * LAM
