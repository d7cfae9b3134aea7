"""`python -m bench --quick` end to end: every figure for both handlers in latest.json, the
chart written, the deterministic targets met. Timing targets are not asserted here: speed
targets live in the benchmark, never in a timed unit test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import report
from bench.harness import run_benchmark
from local_stack import FirestoreEmulator


@pytest.fixture(scope="module")
def quick_run(
    firestore_emulator: FirestoreEmulator, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("bench-results")
    return run_benchmark(quick=True, out_dir=out, emulator_host=firestore_emulator.host), out


def test_json_holds_every_figure_for_both_handlers(
    quick_run: tuple[dict[str, Any], Path],
) -> None:
    returned, out = quick_run
    written = json.loads((out / "latest.json").read_text())
    assert written["figures"] == returned["figures"]
    assert set(written["figures"]) == set(report.FIGURES)
    assert report.all_figures_present(written)
    assert [t["name"] for t in written["targets"]] == [t.name for t in report.TARGETS]
    assert set(written["samples_ms"]) == {"fresh", "burst"}
    assert len(written["samples_ms"]["fresh"]["kit"]) == written["config"]["fresh_runs"]


def test_timing_targets_show_median_spread_and_pairs_of_paired_rounds(
    quick_run: tuple[dict[str, Any], Path],
) -> None:
    written = json.loads((quick_run[1] / "latest.json").read_text())
    config = written["config"]
    rounds = {  # figure key -> paired rounds a quick run makes
        "burst.latency_max_ms": config["bursts"],
        "fresh.latency_median_ms": -(-config["fresh_runs"] // config["fresh_runs_per_round"]),
        "throughput.runs_per_s": config["throughput_rounds"],
        "cold_start.first_reply_ms": config["cold_starts"],
    }
    assert {key: len(per_handler["kit"]) for key, per_handler in
            written["paired_rounds"].items()} == rounds
    timing = [t for t in written["targets"] if t["kind"] == "timing"]
    assert len(timing) == len(rounds)
    for target in timing:
        paired = target["paired"]
        assert paired["pairs"] == len(paired["ratios"]) >= 1
        assert paired["low"] <= paired["q1"] <= paired["median"] <= paired["q3"] \
            <= paired["high"]
        assert f"median of {paired['pairs']} pair" in target["observed"]


def test_chart_is_a_png(quick_run: tuple[dict[str, Any], Path]) -> None:
    assert (quick_run[1] / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_deterministic_figures_and_no_anomalies(quick_run: tuple[dict[str, Any], Path]) -> None:
    result = quick_run[0]
    assert result["anomalies"] == []
    figures = result["figures"]
    assert (figures["fresh.rpcs"]["kit"], figures["fresh.rpcs"]["textbook"]) == (2, 6)
    assert (figures["duplicate_same.rpcs"]["kit"], figures["duplicate_other.rpcs"]["kit"]) \
        == (0, 2)
    # Both handlers are correct: never two executions. The kit runs the job every time;
    # the textbook may fail every delivery of a contended burst (all 500, none ran).
    executions = result["details"]["burst.executions"]
    assert executions["kit"] == [1]
    assert all(n <= 1 for n in executions["textbook"])
    assert all(t["passed"] for t in result["targets"] if t["kind"] == "exact")
    assert "kit/textbook" in report.table(result)


def test_exit_code_fails_on_exact_misses_and_on_timing_misses_only_when_strict() -> None:
    timing_miss: dict[str, Any] = {"anomalies": [], "targets": [
        {"kind": "exact", "passed": True}, {"kind": "timing", "passed": False}]}
    exact_miss: dict[str, Any] = {"anomalies": [], "targets": [
        {"kind": "exact", "passed": False}]}
    anomaly: dict[str, Any] = {"anomalies": ["kit: burst ran twice"], "targets": []}
    assert report.exit_code(timing_miss, strict=False) == 0
    assert report.exit_code(timing_miss, strict=True) == 1
    assert report.exit_code(exact_miss, strict=False) == 1
    assert report.exit_code(anomaly, strict=False) == 1


def test_percentile_is_nearest_rank() -> None:
    from bench.paired import median
    from bench.scenarios import percentile

    samples = [float(n) for n in range(1, 201)]
    assert percentile(samples, 0.99) == 198
    assert percentile([5.0], 0.99) == 5
    assert median([3.0, 1.0, 2.0, 4.0]) == 2.5
