"""Figures, targets, the printed table, latest.json and latency.png."""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from bench.paired import Limit, Verdict, decide
from bench.scenarios import Config, Results


@dataclass(frozen=True)
class FigureSpec:
    scenario: str
    label: str
    unit: str


_BURST = "3 burst of {burst_size}"  # scenario names are formatted with the Config
FIGURES: dict[str, FigureSpec] = {
    "fresh.rpcs": FigureSpec("1 fresh run", "Firestore RPCs per run", "RPCs"),
    "fresh.latency_median_ms": FigureSpec("1 fresh run", "latency, median", "ms"),
    "fresh.latency_p99_ms": FigureSpec("1 fresh run", "latency, p99", "ms"),
    "duplicate_same.rpcs": FigureSpec(
        "2 duplicate, completing instance", "Firestore RPCs", "RPCs"),
    "duplicate_same.latency_median_ms": FigureSpec(
        "2 duplicate, completing instance", "latency, median", "ms"),
    "duplicate_other.rpcs": FigureSpec("2 duplicate, other instance", "Firestore RPCs", "RPCs"),
    "duplicate_other.latency_median_ms": FigureSpec(
        "2 duplicate, other instance", "latency, median", "ms"),
    "burst.executions_min": FigureSpec(_BURST, "executions per burst, min", "runs"),
    "burst.executions_max": FigureSpec(_BURST, "executions per burst, max", "runs"),
    "burst.replies_2xx": FigureSpec(_BURST, "replies 2xx, all bursts", "replies"),
    "burst.replies_409": FigureSpec(_BURST, "replies 409, all bursts", "replies"),
    "burst.replies_5xx": FigureSpec(_BURST, "replies 5xx, all bursts", "replies"),
    "burst.latency_median_ms": FigureSpec(_BURST, "latency, median", "ms"),
    "burst.latency_max_ms": FigureSpec(_BURST, "latency, max", "ms"),
    "burst.rpcs": FigureSpec(_BURST, "Firestore RPCs per burst", "RPCs"),
    "throughput.runs_per_s": FigureSpec(
        "4 throughput, {throughput_clients} clients", "distinct runs", "runs/s"),
    "takeover.rpcs": FigureSpec("5 takeover, lease expired", "Firestore RPCs", "RPCs"),
    "takeover.latency_median_ms": FigureSpec(
        "5 takeover, lease expired", "latency, median", "ms"),
    "cold_start.first_reply_ms": FigureSpec(
        "6 cold start", "spawn to first reply, median", "ms"),
    "cold_start.first_reply_min_ms": FigureSpec(
        "6 cold start", "spawn to first reply, min", "ms"),
}

# A cold start is a ~2 s process start whose time varies by tens of percent from one start
# to the next on a busy machine; "no slower" allows this margin on the median.
COLD_START_NOISE = 0.10

Figures = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class ExactTarget:
    """Deterministic (RPC counts, executions, 5xx): a miss is a defect."""

    name: str
    check: Callable[[Figures], tuple[bool, str]]
    kind: ClassVar[str] = "exact"

    def evaluate(self, results: Results) -> dict[str, Any]:
        passed, observed = self.check(results.figures)
        return {"name": self.name, "kind": self.kind, "passed": passed, "observed": observed}


@dataclass(frozen=True)
class TimingTarget:
    """Depends on the machine: decided on the median kit/comparator ratio of the rounds in
    which both ran side by side (bench.paired), so drift during the run cannot flip it. A
    miss is reported, and fails only with --strict."""

    name: str
    key: str  # the figure whose paired rounds decide (Results.paired)
    limit: Limit
    kind: ClassVar[str] = "timing"

    def evaluate(self, results: Results) -> dict[str, Any]:
        rounds = results.paired[self.key]
        verdict = decide(rounds["kit"], rounds["textbook"], self.limit)
        return {
            "name": self.name, "kind": self.kind, "passed": verdict.passed,
            "observed": describe(verdict), "paired": paired_summary(verdict, self.limit),
        }


Target = ExactTarget | TimingTarget


def ratio(figures: Figures, key: str) -> float | None:
    kit, textbook = figures[key]["kit"], figures[key]["textbook"]
    return kit / textbook if textbook else None


def describe(verdict: Verdict) -> str:
    spread = verdict.spread
    if spread is None:
        return "kit/comparator n/a (no pair had a ratio)"
    return (f"kit/comparator {_ratio(spread.median)} (median of {spread.pairs} "
            f"pair{'s' if spread.pairs != 1 else ''}; IQR {_ratio(spread.q1)}.."
            f"{_ratio(spread.q3)}, range {_ratio(spread.low)}..{_ratio(spread.high)})")


def paired_summary(verdict: Verdict, limit: Limit) -> dict[str, Any]:
    """A timing target's paired ratios for latest.json."""
    spread = asdict(verdict.spread) if verdict.spread else {"pairs": 0}
    return {"limit": str(limit), **spread, "ratios": list(verdict.ratios)}


def _kit(key: str, test: Callable[[float], bool]) -> Callable[[Figures], tuple[bool, str]]:
    def check(figures: Figures) -> tuple[bool, str]:
        value = figures[key]["kit"]
        return test(value), f"kit {_num(value)}"
    return check


def _fresh_rpcs(figures: Figures) -> tuple[bool, str]:
    kit, textbook = figures["fresh.rpcs"]["kit"], figures["fresh.rpcs"]["textbook"]
    return kit == 2 and textbook == 6, f"kit {_num(kit)}, comparator {_num(textbook)}"


def _one_execution(figures: Figures) -> tuple[bool, str]:
    low, high = figures["burst.executions_min"]["kit"], figures["burst.executions_max"]["kit"]
    return low == high == 1, f"kit {_num(low)}..{_num(high)} per burst"


TARGETS: tuple[Target, ...] = (
    ExactTarget("RPCs per fresh run: 2 (comparator 6)", _fresh_rpcs),
    ExactTarget("RPCs for a duplicate on the instance that completed it: 0",
                _kit("duplicate_same.rpcs", lambda v: v == 0)),
    ExactTarget("RPCs for a duplicate on another instance: at most 2",
                _kit("duplicate_other.rpcs", lambda v: v <= 2)),
    ExactTarget("burst: exactly one execution every time", _one_execution),
    ExactTarget("burst: no 5xx", _kit("burst.replies_5xx", lambda v: v == 0)),
    TimingTarget("burst: max latency at most 1/10 of the comparator's",
                 "burst.latency_max_ms", Limit(0.1, at_most=True)),
    TimingTarget("fresh run: median latency at most 0.6 of the comparator's",
                 "fresh.latency_median_ms", Limit(0.6, at_most=True)),
    TimingTarget("throughput: at least 1.5 times the comparator's",
                 "throughput.runs_per_s", Limit(1.5, at_most=False)),
    TimingTarget(f"cold start: no slower than the comparator (+{COLD_START_NOISE:.0%} noise)",
                 "cold_start.first_reply_ms", Limit(1 + COLD_START_NOISE, at_most=True)),
)


def _num(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _ratio(value: float) -> str:
    """Three decimals: a median next to its limit (0.604 against 0.6) must not print as
    the limit itself."""
    return f"{value:.3f}"


def evaluate(results: Results) -> list[dict[str, Any]]:
    return [target.evaluate(results) for target in TARGETS]


def build_report(results: Results, config: Config, quick: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for key, spec in FIGURES.items():
        values = results.figures[key]
        figures[key] = {
            "scenario": spec.scenario.format(**asdict(config)),
            "label": spec.label,
            "unit": spec.unit,
            "kit": values["kit"],
            "textbook": values["textbook"],
            "ratio": ratio(results.figures, key),
        }
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "config": asdict(config),
        "figures": figures,
        "targets": evaluate(results),
        "anomalies": results.anomalies,
        "paired_rounds": results.paired,
        "details": results.details,
        "timings_s": results.timings,
        "samples_ms": results.samples,
    }


def table(report: Mapping[str, Any]) -> str:
    rows = [("scenario", "figure", "unit", "kit", "textbook", "kit/textbook")]
    for figure in report["figures"].values():
        rows.append((
            figure["scenario"], figure["label"], figure["unit"], _num(figure["kit"]),
            _num(figure["textbook"]), _num(figure["ratio"]),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [cell.ljust(w) if i < 3 else cell.rjust(w) for i, (cell, w) in
                 enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def verdict_lines(report: Mapping[str, Any]) -> str:
    lines = []
    for target in report["targets"]:
        mark = "pass" if target["passed"] else "MISS"
        lines.append(f"  [{mark}] {target['name']}: {target['observed']} ({target['kind']})")
    for anomaly in report["anomalies"]:
        lines.append(f"  [ANOMALY] {anomaly}")
    return "\n".join(lines)


def exit_code(report: Mapping[str, Any], strict: bool) -> int:
    """1 on an anomaly or a missed exact target (a defect); timing misses only if strict."""
    if report["anomalies"]:
        return 1
    for target in report["targets"]:
        if not target["passed"] and (strict or target["kind"] == "exact"):
            return 1
    return 0


def write_json(report: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")


def write_chart(report: Mapping[str, Any], path: Path) -> None:
    """ECDFs of the whole-request latency, scenarios 1 and 3, both handlers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    panels = (
        ("fresh", "1  fresh runs, one at a time"),
        ("burst", f"3  bursts of {report['config']['burst_size']} concurrent deliveries "
                  "of one run"),
    )
    colours = {"kit": "#1b7837", "textbook": "#b2182b"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for axis, (scenario, title) in zip(axes, panels, strict=True):
        for name, samples in report["samples_ms"][scenario].items():
            ordered = sorted(samples)
            n = len(ordered)
            axis.step(ordered, [(i + 1) / n for i in range(n)], where="post",
                      color=colours.get(name), label=f"{name} (n={n})")
            mid = ordered[n // 2]
            axis.axvline(mid, color=colours.get(name), linestyle=":", linewidth=1)
            axis.annotate(f"median {mid:.0f} ms", (mid, 0.5), rotation=90, fontsize=8,
                          color=colours.get(name), xytext=(3, 0), textcoords="offset points")
        axis.set_xscale("log")
        axis.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.xaxis.set_major_formatter(ScalarFormatter())
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xlabel("whole HTTP request latency, ms (log scale)")
        axis.set_ylabel("fraction of requests at or below")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(loc="upper left")
    fig.suptitle("scheduler-dedup kit vs textbook transactional handler "
                 f"(Firestore emulator, {report['machine']['cpus']} CPUs)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def all_figures_present(report: Mapping[str, Any]) -> bool:
    return all(
        key in report["figures"]
        and all(isinstance(report["figures"][key][h], int | float)
                and math.isfinite(report["figures"][key][h]) for h in ("kit", "textbook"))
        for key in FIGURES
    )
