"""Timing verdicts on paired rounds (bench.paired): a drift of the machine's speed during
the run must not flip a verdict when the two handlers alternate, and the reported spread
must be the spread of the paired ratios. The machine is simulated: no timing here."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from bench import report
from bench.paired import (
    Limit,
    Spread,
    abba,
    decide,
    median,
    paired_ratios,
    quantile,
    round_medians,
)
from bench.scenarios import Results

KIT, COMPARATOR = "kit", "comparator"
# A true ratio of 0.59, just inside the fresh-run target of 0.6: where drift flips verdicts.
BASE_MS = {KIT: 5.9, COMPARATOR: 10.0}
TRUE_RATIO = 0.59
LIMIT = Limit(0.6, at_most=True)
RUNS, PER_ROUND = 200, 10

# The machine's slowdown factor at a point of the run (0 = start, 1 = end).
Drift = Callable[[float], float]


def second_half_twice_as_slow(progress: float) -> float:
    return 2.0 if progress >= 0.5 else 1.0


def twice_as_slow_from_mid_round(progress: float) -> float:
    return 2.0 if progress >= 0.37 else 1.0  # 0.37 of 400 slots: inside round 7


def slowing_steadily_to_three_times(progress: float) -> float:
    return 1.0 + 2.0 * progress


def a_three_times_slower_spell(progress: float) -> float:
    return 3.0 if 0.40 <= progress < 0.45 else 1.0


DRIFTS = [second_half_twice_as_slow, twice_as_slow_from_mid_round,
          slowing_steadily_to_three_times, a_three_times_slower_spell]


def interleaved_schedule(runs: int) -> list[str]:
    """The order in which the bench measures: kit, comparator, comparator, kit, ..."""
    return [side for i in range(runs) for side in abba(i, (KIT, COMPARATOR))]


def blocked_schedule(runs: int, first: str, second: str) -> list[str]:
    """One long block per handler: what the interleaving replaces."""
    return [first] * runs + [second] * runs


def measure(schedule: Sequence[str], drift: Drift, first_of_pair_slower: float = 1.0
            ) -> dict[str, list[float]]:
    """One latency per slot of the schedule, on a machine whose speed drifts, and where
    the first measurement of each pair may pay for a cold cache."""
    samples: dict[str, list[float]] = {KIT: [], COMPARATOR: []}
    for slot, side in enumerate(schedule):
        order_effect = first_of_pair_slower if slot % 2 == 0 else 1.0
        samples[side].append(BASE_MS[side] * drift(slot / len(schedule)) * order_effect)
    return samples


def verdict_on_rounds(samples: dict[str, list[float]]) -> tuple[bool, float]:
    verdict = decide(round_medians(samples[KIT], PER_ROUND),
                     round_medians(samples[COMPARATOR], PER_ROUND), LIMIT)
    assert verdict.spread is not None
    return verdict.passed, verdict.spread.median


def test_without_drift_the_median_paired_ratio_is_the_true_ratio() -> None:
    passed, ratio = verdict_on_rounds(measure(interleaved_schedule(RUNS), lambda _: 1.0))
    assert passed
    assert ratio == pytest.approx(TRUE_RATIO)


@pytest.mark.parametrize("drift", DRIFTS, ids=lambda drift: drift.__name__)
def test_drift_does_not_flip_the_verdict_of_interleaved_rounds(drift: Drift) -> None:
    passed, ratio = verdict_on_rounds(measure(interleaved_schedule(RUNS), drift))
    assert passed
    assert ratio == pytest.approx(TRUE_RATIO, rel=0.01)


def test_the_same_drift_flips_the_verdict_of_one_block_per_handler() -> None:
    """Why the bench interleaves: with the comparator's block first, the kit's block gets
    the slow second half and the kit looks twice as slow as it is."""
    samples = measure(blocked_schedule(RUNS, COMPARATOR, KIT), second_half_twice_as_slow)
    passed, ratio = verdict_on_rounds(samples)
    assert not passed
    assert ratio == pytest.approx(2 * TRUE_RATIO)


def test_alternating_who_goes_first_cancels_an_order_effect() -> None:
    """Whoever goes first in a pair is 10% slower: the kit always first would miss."""
    passed, ratio = verdict_on_rounds(
        measure(interleaved_schedule(RUNS), second_half_twice_as_slow, 1.1))
    assert passed
    assert ratio == pytest.approx(TRUE_RATIO)
    kit_always_first = [KIT, COMPARATOR] * RUNS
    assert not verdict_on_rounds(measure(kit_always_first, second_half_twice_as_slow, 1.1))[0]


def test_a_throughput_target_survives_a_slower_second_half_too() -> None:
    """Rates fall where latencies rise; 8 rounds as in the bench's throughput scenario."""
    rates = {KIT: 155.0, COMPARATOR: 100.0}
    schedule = interleaved_schedule(8)
    per_round: dict[str, list[float]] = {KIT: [], COMPARATOR: []}
    for slot, side in enumerate(schedule):
        per_round[side].append(rates[side] / second_half_twice_as_slow(slot / len(schedule)))
    verdict = decide(per_round[KIT], per_round[COMPARATOR], Limit(1.5, at_most=False))
    assert verdict.passed
    assert verdict.spread == Spread(1.55, 1.55, 1.55, 1.55, 1.55, 8)


def test_one_disturbed_round_does_not_decide_but_shows_in_the_range() -> None:
    """A stall during one kit round: the pooled rate would miss 1.5, the median does not."""
    kit = [155.0] * 7 + [60.0]
    comparator = [100.0] * 8
    assert sum(kit) / sum(comparator) < 1.5
    verdict = decide(kit, comparator, Limit(1.5, at_most=False))
    assert verdict.passed
    assert verdict.spread is not None
    assert (verdict.spread.median, verdict.spread.low) == pytest.approx((1.55, 0.6))


def test_spread_is_the_median_quartiles_and_range_of_the_ratios() -> None:
    spread = Spread.of([0.8, 0.5, 0.7, 0.6])
    assert spread.pairs == 4
    assert (spread.median, spread.q1, spread.q3, spread.low, spread.high) == pytest.approx(
        (0.65, 0.575, 0.725, 0.5, 0.8))
    odd = Spread.of([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (odd.median, odd.q1, odd.q3, odd.low, odd.high) == (3.0, 2.0, 4.0, 1.0, 5.0)
    assert Spread.of([0.4]) == Spread(0.4, 0.4, 0.4, 0.4, 0.4, 1)


def test_quantile_matches_linear_interpolation_and_refuses_nonsense() -> None:
    assert quantile([10.0, 20.0], 0.25) == 12.5
    assert median([3.0, 1.0, 2.0, 4.0]) == 2.5
    with pytest.raises(ValueError):
        quantile([], 0.5)
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)


def test_round_medians_take_consecutive_samples_and_keep_a_short_last_round() -> None:
    assert round_medians([1.0, 3.0, 2.0, 30.0, 10.0, 20.0, 7.0], 3) == [2.0, 20.0, 7.0]
    with pytest.raises(ValueError):
        round_medians([1.0], 0)


def test_pairs_without_a_comparator_figure_have_no_ratio() -> None:
    assert paired_ratios([6.0, 5.0, 4.0], [10.0, 0.0, 8.0]) == [0.6, 0.5]
    with pytest.raises(ValueError, match="2 kit rounds but 1 comparator"):
        paired_ratios([1.0, 2.0], [1.0])
    no_pairs = decide([5.0], [0.0], LIMIT)
    assert (no_pairs.passed, no_pairs.spread, no_pairs.ratios) == (False, None, ())


def test_limits_include_their_value() -> None:
    assert Limit(0.6, at_most=True).met_by(0.6)
    assert not Limit(0.6, at_most=True).met_by(0.601)
    assert Limit(1.5, at_most=False).met_by(1.5)
    assert not Limit(1.5, at_most=False).met_by(1.499)
    assert (str(Limit(0.6, at_most=True)), str(Limit(1.5, at_most=False))) == ("<= 0.6", ">= 1.5")


def test_abba_alternates_which_side_goes_first() -> None:
    assert [abba(i, ("a", "b")) for i in range(4)] == [
        ("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")]


def test_a_timing_target_reports_median_spread_pairs_and_verdict() -> None:
    """The fresh-run target as latest.json and the printed line show it."""
    target = next(t for t in report.TARGETS if isinstance(t, report.TimingTarget)
                  and t.key == "fresh.latency_median_ms")
    results = Results(paired={"fresh.latency_median_ms": {
        "kit": [5.0, 6.0, 7.0, 8.0], "textbook": [10.0, 10.0, 10.0, 10.0]}})
    verdict = target.evaluate(results)
    assert verdict["passed"] is False  # median 0.65 > 0.6
    assert verdict["kind"] == "timing"
    assert verdict["paired"] == {
        "limit": "<= 0.6", "median": pytest.approx(0.65), "q1": pytest.approx(0.575),
        "q3": pytest.approx(0.725), "low": 0.5, "high": 0.8, "pairs": 4,
        "ratios": [0.5, 0.6, 0.7, 0.8]}
    assert verdict["observed"] == (
        "kit/comparator 0.650 (median of 4 pairs; IQR 0.575..0.725, range 0.500..0.800)")
