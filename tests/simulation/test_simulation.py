"""The deterministic simulation (simulation/): seeds pass, replay exactly, and a broken
protocol is caught (the invariants can fail)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from simulation import firestore_fake
from simulation.cli import main, run_seed
from simulation.invariants import check
from simulation.world import draw_world, run_world

# Seeds that pass on this kit (a few, to keep the suite fast; make simulate runs hundreds).
PASSING_SEEDS = (0, 1, 2, 3)

# Seeds that once found a bug, kept so that it stays fixed: fill in as bugs are fixed (the
# seed, and a comment naming the bug). Each must pass.
REGRESSION_SEEDS: tuple[int, ...] = ()


@pytest.mark.parametrize("seed", PASSING_SEEDS)
def test_a_seed_meets_every_invariant(seed: int) -> None:
    run = run_world(draw_world(seed))
    assert run.recorder.lines, "the seed delivered nothing"
    assert check(run) == []


@pytest.mark.parametrize("seed", REGRESSION_SEEDS)
def test_a_regression_seed_meets_every_invariant(seed: int) -> None:
    report = run_seed(seed)
    assert not report.violations, report.text


def test_a_seed_replays_exactly() -> None:
    first, again = run_world(draw_world(5)), run_world(draw_world(5))
    assert first.recorder.trace == again.recorder.trace
    assert [line.entry.get("run_id") for line in first.recorder.lines] == [
        line.entry.get("run_id") for line in again.recorder.lines]


@pytest.fixture
def claims_without_precondition(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A broken store: `create` overwrites an existing document (no "must not exist"
    precondition), so two deliveries of one run can both claim it."""
    def create(self: firestore_fake.DocumentReference, document_data: object,
               **_: object) -> object:
        return self.set(document_data)  # type: ignore[arg-type]

    monkeypatch.setattr(firestore_fake.DocumentReference, "create", create)
    yield


@pytest.mark.usefixtures("claims_without_precondition")
def test_a_protocol_that_skips_the_claim_is_caught() -> None:
    found = []
    for seed in range(40):
        found += [v for v in check(run_world(draw_world(seed))) if v.invariant == "once"]
        if found:
            break
    assert found, "no seed caught a claim that does not exclude a second claim"
    assert "executed" in found[0].text


def test_the_command_line_ends_with_its_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "2", "--first", "0", "--workers", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "simulation: 2 schedules, 0 invariant violations")
