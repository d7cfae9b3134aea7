"""The run watchdog: every expected run accounted for, one module per idea.

- due.py: a watched job's schedule (WatchedJob: its business runs, their latest delivery),
  when a run's verdict is due (verdict_due_at), rfc3339;
- settings.py: its DEDUP_WATCH_* settings and job table (WatchSettings, parse_watch_jobs);
- verdicts.py: a run's verdict from its record (classify_run), the problems it reports
  (Problem, MISSED, FAILED, ...), a tick's verdicts on one job (JobTick, ForcedRun);
- cursors.py: its store: records by ID, the guarded per-job cursor documents (Cursor,
  FirestoreWatchStore, CursorMoved); outbox.py: the problem and incident lines a tick
  commits with its cursors and logs once they landed (announced from durable state);
- judging.py: judging one job at a tick: its reads, verdicts and cursor moves;
- deliveries.py: what a tick delivers and how (Delivered, the queue's retry bounds);
  catch_up.py: missed runs delivered again; rerun_deliveries.py: the re-run requests and
  backfills' runs delivered, checked as `make rerun` checks them;
- tick.py: one tick over every job (Watchdog, TickResult) and the HTTP handler
  watch_scheduled_runs calls (WatchdogHandler, build_watchdog_handler_from_env);
- delivery.py and cloud_tasks.py: the delivery seam (a direct POST, a Cloud Tasks task);
  reruns.py: the re-run queue; backfills.py: `make backfill`'s pacing; incidents.py: alert
  streaks; ran_twice.py: a run executed twice, from its record; beyond.py: runs beyond the
  schedule (unexplained_run, too_many_forced_runs), from the ledgers the function notes;
  schedule_edits.py: each run judged by the schedule in force at its time;
- windows.py: declared silence windows; silences.py: `make silence`'s silences (SilenceBook:
  the silence each job is in), and what a silence holds back (settle_incidents).
"""
