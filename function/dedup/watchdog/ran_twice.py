"""`ran_twice`: the watchdog's proof of the promise, from what a run's record says.

One run (one run_id: one generation of one scheduled time) executes once. Its record
cannot list executions (recording one is exactly what fails in the cases that matter), but
it says when an attempt was taken over unfinished: the protocol carries, in every later
attempt's writes, the numbers of the attempts whose claim it found `in_progress` with its
lease lapsed (RunRecord.unfinished_attempts). Such an attempt held the run and stopped
without recording how its attempt ended; once the run has finished under a later attempt,
that attempt executed the job too. The earlier one:

- ran the job and could not record it (`completed_unrecorded`: the store unreachable for
  longer than the lease), and the run was delivered again (a retry still queued, a late
  duplicate, a catch-up): two executions;
- was still running when it lost its claim (`claim_lost`: renewals failed for most of a
  lease; the job is told to stop, cooperatively): two executions, possibly side by side;
- was killed mid-job (its instance died): the job ran partly, then again;
- or ran nothing: killed between its claim and its job, or its claim write's outcome stayed
  unknown until its fence time (the store unreachable at the claim). The record cannot tell
  these apart from the above; they are reported too, and the runbook says how to tell.

A takeover of a `failed` record is not counted: that attempt ran and raised, and the retry
is the protocol working as documented.
"""

from __future__ import annotations

from dedup.store import RunStatus, StoredRun

RAN_TWICE = "ran_twice"


def second_execution(stored: StoredRun | None) -> str | None:
    """Why a finished run (completed or failed) was executed by more than one attempt, or
    None. A run still in progress is not judged yet (its attempts may still be taken over)."""
    if stored is None or stored.record.status is RunStatus.IN_PROGRESS:
        return None
    record = stored.record
    if not record.unfinished_attempts:
        return None
    earlier = ", ".join(str(a) for a in record.unfinished_attempts)
    return (f"attempt {record.attempts} {record.status.value} the run after taking over "
            f"attempt(s) {earlier}, which held it and stopped without recording an outcome "
            "(completed_unrecorded, claim_lost, or killed mid-job)")
