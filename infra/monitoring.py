"""Monitoring: log-based metrics, alert policies, notification channels and a dashboard.

Everything is read from the functions' structured log lines (JSON on stdout, which Cloud
Logging parses into `jsonPayload`); the functions export nothing themselves:

- one line per delivery (dedup function, proxy and each runtime's function): `outcome`,
  `job` (the Scheduler job ID), `latency_ms`;
- the watchdog's problem lines: `component: "watchdog"`, `kind` (missed, failed, overlong,
  never_ran, ran_twice, malformed, unexplained_run, too_many_forced_runs), `job`; one
  summary line per tick (`message` "watchdog summary ..."); and one line per incident
  transition (dedup/watchdog/incidents.py): `event` (`incident_opened`,
  `incident_resolved`), `incident_kind` (failing, ran_twice, beyond_schedule), `job`.

Log-based metrics (user-defined, `logging.googleapis.com/user/<namePrefix>-...`):
deliveries by job and outcome, job duration (a distribution of `latency_ms`) by job and
outcome, watchdog problems by job and kind, incident transitions by job, kind and event,
completed_unrecorded and claim_lost deliveries by job, and watchdog summaries. Alert
policies: an incident opened (a job's streak of bad runs reached its failureThreshold, or
a run ran twice), and one resolved (its recoveryThreshold of good runs), each notified
once; a malformed document the watchdog refused; store_unavailable deliveries above a
rate; the watchdog's summary line absent for 3 of its periods (so the watchdog itself is
watched). Every policy notifies the e-mail channels of `alerts.emails`.

Every metric and policy counts every job, whichever function runs it: the delivery
metrics read all delivery services (a runtime's function among them), the watchdog's its
whole job table. The dashboard adds a row per runtime (a stack without runtimes has the
same dashboard as before): that runtime's deliveries, failures, job duration and
instances, titled with its name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pulumi

from infra import gcp
from infra.config import WatchdogSettings
from infra.config.runtimes import RESERVED_RUNTIME_NAMES
from infra.contracts.limits import (
    ALERT_ALIGNMENT_PERIOD_MAX_SECONDS,
    MISSING_DATA_MIN_DURATION_SECONDS,
)
from infra.scheduler_rules import duration_string, schedule_period_seconds

COMPONENT_TYPE: Final = "scheduler-dedup:index:Monitoring"
USER_METRIC_PREFIX: Final = "logging.googleapis.com/user/"
STORE_UNAVAILABLE_THRESHOLD: Final = 5
"""store_unavailable deliveries per STORE_UNAVAILABLE_WINDOW_SECONDS that raise an alert."""
STORE_UNAVAILABLE_WINDOW_SECONDS: Final = 300
ABSENT_PERIODS: Final = 3
"""The watchdog's summary line absent for this many of its periods raises an alert."""
AUTO_CLOSE_SECONDS: Final = 1800
"""An incident with no data for this long closes (Monitoring's shortest), so the next problem
of the same job and kind notifies again instead of joining a stale incident."""
ABSENCE_MIN_SECONDS: Final = 120
ABSENCE_MAX_SECONDS: Final = 84600  # Cloud Monitoring's longest absence duration: 23.5 h
PROBLEM_KINDS: Final = ("missed", "failed", "overlong", "never_ran", "ran_twice", "malformed",
                        "unexplained_run", "too_many_forced_runs")
FAILED_OUTCOMES: Final = ("failed", "failed_permanent")
"""Delivery outcomes of a run whose job raised (dedup.outcomes.Outcome): a runtime's errors."""
INSTANCE_COUNT_METRIC: Final = "run.googleapis.com/container/instance_count"
"""Cloud Run's own metric: a revision's container instances, by `state` (active, idle)."""
INCIDENT_REPEAT_SLACK_SECONDS: Final = 300
"""How much later than one watchdog period a transition's repeat may come and still join
its incident (see incident_window_seconds)."""
CONDITION_DURATION_SECONDS: Final = MISSING_DATA_MIN_DURATION_SECONDS
"""How long a threshold condition must hold before it alerts: the shortest duration the
Monitoring API accepts on a condition that sets evaluationMissingData (a "0s" duration is
refused with 400 "Conditions setting evaluation_missing_data must have a non-zero
duration"; Cloud Monitoring API, projects.alertPolicies, MetricThreshold.duration and
evaluationMissingData, https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.alertPolicies).
Durations are multiples of 60 s, so 60 s is also the least delay an alert can have."""
WATCHDOG_PROBLEM_WINDOW_SECONDS: Final = CONDITION_DURATION_SECONDS + 60
"""The watchdog-problem condition's alignment period. Monitoring evaluates a sliding window
("Behavior of metric-based alerting policies",
https://cloud.google.com/monitoring/alerts/concepts-indepth), so one logged problem keeps the
window's sum above 0 for the whole period: a period longer than the condition's duration
lets a single problem (each is logged once) still hold the condition for its full
duration and alert, instead of sliding out just as the duration is reached."""


def absence_seconds(settings: WatchdogSettings) -> int:
    """ABSENT_PERIODS watchdog periods, in whole minutes, within what Monitoring allows."""
    period = schedule_period_seconds(settings.schedule, settings.time_zone)
    wanted = math.ceil(ABSENT_PERIODS * period / 60) * 60
    return max(ABSENCE_MIN_SECONDS, min(ABSENCE_MAX_SECONDS, wanted))


def incident_window_seconds(settings: WatchdogSettings) -> int:
    """The incident conditions' alignment period: one watchdog period + 5 minutes, whole
    minutes, within what Monitoring allows. A transition line is logged again when its
    tick's cursor write failed (by the Scheduler retry, or at the latest the next tick);
    within this window the repeat is summed into the same time series while its incident
    is still open, so Monitoring opens no second incident and notifies once (an incident
    is opened when a condition starts to be met, "Behavior of metric-based alerting
    policies", https://cloud.google.com/monitoring/alerts/concepts-indepth)."""
    period = schedule_period_seconds(settings.schedule, settings.time_zone)
    wanted = math.ceil((period + INCIDENT_REPEAT_SLACK_SECONDS) / 60) * 60
    return max(CONDITION_DURATION_SECONDS + 60, min(ALERT_ALIGNMENT_PERIOD_MAX_SECONDS, wanted))


def _service_filter(services: Sequence[str]) -> str:
    names = " OR ".join(f'"{s}"' for s in services)
    return f'resource.type="cloud_run_revision" AND resource.labels.service_name=({names})'


@dataclass(frozen=True)
class MetricSpec:
    """One log-based metric: its suffix, log filter, labels and (distribution) value."""

    suffix: str
    description: str
    filter: str
    labels: Mapping[str, str] = field(default_factory=dict)
    """label -> jsonPayload field it is extracted from."""
    value_field: str | None = None
    """A distribution of this jsonPayload field (milliseconds); None: a count."""


@dataclass(frozen=True)
class MonitoringArgs:
    project: str
    name_prefix: str
    delivery_services: Sequence[str]
    """The Cloud Run services (function names) that log deliveries: the dedup function
    (`<namePrefix>`), the proxy (`<namePrefix>-proxy`) and each runtime's function
    (`<namePrefix>-<runtime>`)."""
    watchdog_service: str | None
    """The watchdog's service; None: no watchdog, so no watchdog metrics or alerts."""
    watchdog: WatchdogSettings
    emails: Sequence[str]
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    """The Logging and Monitoring APIs."""

    def metric_name(self, suffix: str) -> str:
        return f"{self.name_prefix}-{suffix}"

    def metric_type(self, suffix: str) -> str:
        return USER_METRIC_PREFIX + self.metric_name(suffix)

    @property
    def runtime_services(self) -> dict[str, str]:
        """Each runtime's name -> its service, in delivery_services' order: the services
        named `<namePrefix>-<name>` (StackConfig.runtime_function_name) whose name a runtime
        may take; the proxy's suffix is a reserved name (RESERVED_RUNTIME_NAMES), the dedup
        function's service is `<namePrefix>` itself."""
        prefix = f"{self.name_prefix}-"
        return {service.removeprefix(prefix): service for service in self.delivery_services
                if service.startswith(prefix)
                and service.removeprefix(prefix) not in RESERVED_RUNTIME_NAMES}

    def metrics(self) -> list[MetricSpec]:
        deliveries = f"{_service_filter(self.delivery_services)} AND jsonPayload.outcome:*"
        specs = [
            MetricSpec("deliveries", "Scheduler deliveries by job and outcome.", deliveries,
                       {"job": "job", "outcome": "outcome"}),
            MetricSpec("job-duration", "Delivery latency (the job's run) by job and outcome, "
                       "ms.", f"{deliveries} AND jsonPayload.latency_ms:*",
                       {"job": "job", "outcome": "outcome"}, value_field="latency_ms"),
            MetricSpec("completed-unrecorded", "Runs that completed but could not be "
                       "recorded (a late retry may run them again).",
                       f'{deliveries} AND jsonPayload.outcome="completed_unrecorded"',
                       {"job": "job"}),
            MetricSpec("claim-lost", "Runs whose claim was taken over while the job ran.",
                       f'{deliveries} AND jsonPayload.outcome="claim_lost"', {"job": "job"}),
        ]
        if self.watchdog_service is not None:
            watchdog = f'{_service_filter([self.watchdog_service])} AND ' \
                'jsonPayload.component="watchdog"'
            specs += [
                MetricSpec("watchdog-problems", "Missed, failed, overlong, never-run and "
                           "ran-twice runs and malformed documents reported by the watchdog, "
                           "by job and kind.",
                           f"{watchdog} AND jsonPayload.kind:*", {"job": "job", "kind": "kind"}),
                MetricSpec("watchdog-incidents", "Incidents opened and resolved by the "
                           "watchdog's streaks (one line per transition), by job, kind and "
                           "event.", f"{watchdog} AND jsonPayload.event:* AND "
                           "jsonPayload.incident_kind:*",
                           {"job": "job", "kind": "incident_kind", "event": "event"}),
                MetricSpec("watchdog-summaries", "The watchdog's summary lines (one per tick).",
                           f'{watchdog} AND jsonPayload.message=~"^watchdog summary"'),
            ]
        return specs

    def dashboard(self) -> dict[str, Any]:
        """The dashboard's JSON (Cloud Monitoring's Dashboard resource)."""

        def chart(title: str, suffix: str, group_by: Sequence[str], aligner: str,
                  reducer: str, plot: str = "STACKED_BAR", extra: str = "",
                  metric_type: str | None = None) -> dict[str, Any]:
            """An xyChart of the log-based metric `suffix` (or of `metric_type`)."""
            return {
                "title": title,
                "xyChart": {
                    "dataSets": [{
                        "plotType": plot,
                        "minAlignmentPeriod": "60s",
                        "timeSeriesQuery": {"timeSeriesFilter": {
                            "filter": f'metric.type="{metric_type or self.metric_type(suffix)}" '
                            f'resource.type="cloud_run_revision"{extra}',
                            "aggregation": {
                                "alignmentPeriod": "60s",
                                "perSeriesAligner": aligner,
                                "crossSeriesReducer": reducer,
                                "groupByFields": [f"metric.label.{g}" for g in group_by],
                            },
                        }},
                    }],
                },
            }

        widgets = [
            chart("Deliveries by job and outcome", "deliveries", ["job", "outcome"],
                  "ALIGN_SUM", "REDUCE_SUM"),
            chart("Duplicates suppressed by job", "deliveries", ["job"], "ALIGN_SUM",
                  "REDUCE_SUM", extra=' metric.label.outcome="duplicate"'),
            chart("Job duration p95 by job (ms)", "job-duration", ["job"],
                  "ALIGN_DELTA", "REDUCE_PERCENTILE_95", plot="LINE"),
            chart("Completed but unrecorded by job", "completed-unrecorded", ["job"],
                  "ALIGN_SUM", "REDUCE_SUM"),
            chart("Claims lost by job", "claim-lost", ["job"], "ALIGN_SUM", "REDUCE_SUM"),
        ]
        if self.watchdog_service is not None:
            widgets += [
                chart("Watchdog problems by job and kind", "watchdog-problems",
                      ["job", "kind"], "ALIGN_SUM", "REDUCE_SUM"),
                chart("Incidents opened and resolved by job", "watchdog-incidents",
                      ["job", "kind", "event"], "ALIGN_SUM", "REDUCE_SUM"),
                chart("Runs executed twice by job", "watchdog-problems", ["job"],
                      "ALIGN_SUM", "REDUCE_SUM", extra=' metric.label.kind="ran_twice"'),
            ]
        tiles = [
            {"xPos": (i % 2) * 24, "yPos": (i // 2) * 16, "width": 24, "height": 16,
             "widget": widget}
            for i, widget in enumerate(widgets)
        ]
        # Below them, a row per runtime: its own function's share of the same metrics
        # (their series carry the service of each log line) and its instances.
        first_row = (len(widgets) + 1) // 2 * 16
        for row, (runtime, service) in enumerate(self.runtime_services.items()):
            own = f' resource.label.service_name="{service}"'
            failed = ",".join(f'"{outcome}"' for outcome in FAILED_OUTCOMES)
            title = f"Runtime {runtime} ({service})"
            row_widgets = [
                chart(f"{title}: deliveries by job and outcome", "deliveries",
                      ["job", "outcome"], "ALIGN_SUM", "REDUCE_SUM", extra=own),
                chart(f"{title}: failed runs by job", "deliveries", ["job"], "ALIGN_SUM",
                      "REDUCE_SUM", extra=f"{own} metric.label.outcome=one_of({failed})"),
                chart(f"{title}: job duration p95 by job (ms)", "job-duration", ["job"],
                      "ALIGN_DELTA", "REDUCE_PERCENTILE_95", plot="LINE", extra=own),
                chart(f"{title}: instances", "", ["state"], "ALIGN_MAX", "REDUCE_SUM",
                      plot="LINE", extra=own, metric_type=INSTANCE_COUNT_METRIC),
            ]
            tiles += [
                {"xPos": column * 12, "yPos": first_row + row * 16, "width": 12,
                 "height": 16, "widget": widget}
                for column, widget in enumerate(row_widgets)
            ]
        return {
            "displayName": f"Scheduler dedup ({self.name_prefix})",
            "mosaicLayout": {"columns": 48, "tiles": tiles},
        }


class Monitoring(pulumi.ComponentResource):
    """The stack's log-based metrics, alert policies, e-mail channels and dashboard."""

    metrics: dict[str, gcp.logging.Metric]
    channels: list[gcp.monitoring.NotificationChannel]
    alert_policies: dict[str, gcp.monitoring.AlertPolicy]
    dashboard: gcp.monitoring.Dashboard

    def __init__(
        self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        project = args.project
        after_apis = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        self.metrics = {}
        for spec in args.metrics():
            labels = [
                gcp.logging.MetricMetricDescriptorLabelArgs(key=key, value_type="STRING")
                for key in spec.labels
            ]
            distribution = spec.value_field is not None
            self.metrics[spec.suffix] = gcp.logging.Metric(
                f"{name}-metric-{spec.suffix}",
                project=project,
                name=args.metric_name(spec.suffix),
                description=spec.description,
                filter=spec.filter,
                metric_descriptor=gcp.logging.MetricMetricDescriptorArgs(
                    metric_kind="DELTA",
                    value_type="DISTRIBUTION" if distribution else "INT64",
                    unit="ms" if distribution else "1",
                    labels=labels,
                ),
                label_extractors={
                    key: f"EXTRACT(jsonPayload.{source})" for key, source in spec.labels.items()
                },
                value_extractor=(
                    f"EXTRACT(jsonPayload.{spec.value_field})" if distribution else None
                ),
                # 10 ms .. about 4 h, growing by half each bucket.
                bucket_options=gcp.logging.MetricBucketOptionsArgs(
                    exponential_buckets=gcp.logging.MetricBucketOptionsExponentialBucketsArgs(
                        num_finite_buckets=40, growth_factor=1.5, scale=10
                    )
                ) if distribution else None,
                opts=after_apis,
            )

        self.channels = [
            gcp.monitoring.NotificationChannel(
                f"{name}-email-{index}",
                project=project,
                display_name=f"Scheduler dedup ({args.name_prefix}): {email}",
                type="email",
                labels={"email_address": email},
                opts=after_apis,
            )
            for index, email in enumerate(args.emails)
        ]
        channel_ids = [channel.id for channel in self.channels]

        def policy(
            suffix: str,
            display_name: str,
            condition: gcp.monitoring.AlertPolicyConditionArgs,
            severity: str | None,
            documentation: str,
            metrics: Sequence[pulumi.Resource],
            notify_on_close: bool = True,
        ) -> gcp.monitoring.AlertPolicy:
            return gcp.monitoring.AlertPolicy(
                f"{name}-alert-{suffix}",
                project=project,
                display_name=f"Scheduler dedup ({args.name_prefix}): {display_name}",
                combiner="OR",
                conditions=[condition],
                severity=severity,
                notification_channels=channel_ids,
                documentation=gcp.monitoring.AlertPolicyDocumentationArgs(
                    content=documentation, mime_type="text/markdown"
                ),
                alert_strategy=gcp.monitoring.AlertPolicyAlertStrategyArgs(
                    auto_close=duration_string(AUTO_CLOSE_SECONDS),
                    # An incident of a transition line closes when its window passes, which
                    # says nothing: the recovery is a policy (and a notification) of its own.
                    notification_prompts=None if notify_on_close else ["OPENED"],
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(metrics)),
            )

        self.alert_policies = {}
        window = duration_string(STORE_UNAVAILABLE_WINDOW_SECONDS)
        deliveries = self.metrics["deliveries"]
        self.alert_policies["store-unavailable"] = policy(
            "store-unavailable",
            "Firestore unavailable to the dedup function",
            gcp.monitoring.AlertPolicyConditionArgs(
                display_name=f"more than {STORE_UNAVAILABLE_THRESHOLD} store_unavailable "
                f"deliveries in {STORE_UNAVAILABLE_WINDOW_SECONDS // 60} minutes",
                condition_threshold=gcp.monitoring.AlertPolicyConditionConditionThresholdArgs(
                    filter=f'metric.type="{args.metric_type("deliveries")}" AND '
                    'resource.type="cloud_run_revision" AND '
                    'metric.label.outcome="store_unavailable"',
                    comparison="COMPARISON_GT",
                    threshold_value=STORE_UNAVAILABLE_THRESHOLD,
                    # The API wants a non-zero duration with evaluationMissingData (60 s
                    # at least): the sum must stay above the threshold for a minute, so it
                    # fires for more than the threshold within about 4 of the 5 minutes,
                    # a minute after the burst.
                    duration=duration_string(CONDITION_DURATION_SECONDS),
                    # No deliveries failing is no problem: the incident closes.
                    evaluation_missing_data="EVALUATION_MISSING_DATA_INACTIVE",
                    aggregations=[
                        gcp.monitoring.AlertPolicyConditionConditionThresholdAggregationArgs(
                            alignment_period=window,
                            per_series_aligner="ALIGN_SUM",
                            cross_series_reducer="REDUCE_SUM",
                            group_by_fields=["metric.label.job"],
                        )
                    ],
                ),
            ),
            "ERROR",
            "Deliveries answered `store_unavailable`: the function could not claim the run "
            "in Firestore and nothing ran; Scheduler retries within the job's retry window. "
            "Check Firestore's status and the function's logs.",
            [deliveries],
        )
        def any_line(
            display_name: str, suffix: str, match: str, window_seconds: int,
            group_by: Sequence[str],
        ) -> gcp.monitoring.AlertPolicyConditionArgs:
            """Met while a line counted by metric `suffix` (and `match`) lies within the
            last `window_seconds`, per `group_by` series: each line is logged once (the
            watchdog's cursors), so a window longer than the condition's duration lets a
            single line hold the condition for its whole duration and alert; the window
            passing without another closes the incident."""
            return gcp.monitoring.AlertPolicyConditionArgs(
                display_name=display_name,
                condition_threshold=gcp.monitoring.AlertPolicyConditionConditionThresholdArgs(
                    filter=f'metric.type="{args.metric_type(suffix)}" AND '
                    f'resource.type="cloud_run_revision" AND {match}',
                    comparison="COMPARISON_GT",
                    threshold_value=0,
                    duration=duration_string(CONDITION_DURATION_SECONDS),
                    evaluation_missing_data="EVALUATION_MISSING_DATA_INACTIVE",
                    aggregations=[
                        gcp.monitoring.AlertPolicyConditionConditionThresholdAggregationArgs(
                            alignment_period=duration_string(window_seconds),
                            per_series_aligner="ALIGN_SUM",
                            cross_series_reducer="REDUCE_SUM",
                            group_by_fields=[f"metric.label.{g}" for g in group_by],
                        )
                    ],
                ),
            )

        if args.watchdog_service is not None:
            problems = self.metrics["watchdog-problems"]
            incidents = self.metrics["watchdog-incidents"]
            incident_window = incident_window_seconds(args.watchdog)
            # Runs page through incidents (one per streak); a malformed document is no run
            # and no streak: each one alerts.
            self.alert_policies["watchdog-problem"] = policy(
                "watchdog-problem",
                "the run watchdog refused a malformed document",
                any_line("a cursor or re-run request the watchdog cannot read",
                         "watchdog-problems", 'metric.label.kind="malformed"',
                         WATCHDOG_PROBLEM_WINDOW_SECONDS, ["job", "kind"]),
                "ERROR",
                "The run watchdog found a cursor or re-run request in its own database that "
                "it cannot read (`kind: malformed`; the log line's `document` names it). The "
                "job is judged afresh and the request refused; only the watchdog's account "
                "and the operators write that database: see the runbook.",
                [problems],
            )
            self.alert_policies["incident-opened"] = policy(
                "incident-opened",
                "a job is failing, or a run ran twice",
                any_line("an incident opened by the watchdog", "watchdog-incidents",
                         'metric.label.event="incident_opened"', incident_window, ["job", "kind"]),
                "ERROR",
                "The run watchdog opened an incident for a Scheduler job: `failing` (its "
                "`failureThreshold` of runs in a row were missed, failed or overlong, or it "
                "never ran) or `ran_twice` (a run was executed by two attempts). One "
                "notification per streak; a recovery notification follows once the job has "
                "`recoveryThreshold` good runs in a row. The watchdog's `incident_opened` "
                "line (jsonPayload.event) names the incident, its first and last bad run.",
                [incidents],
                notify_on_close=False,
            )
            self.alert_policies["incident-resolved"] = policy(
                "incident-resolved",
                "a job recovered",
                any_line("an incident resolved by the watchdog", "watchdog-incidents",
                         'metric.label.event="incident_resolved"', incident_window,
                         ["job", "kind"]),
                None,
                "The run watchdog closed an incident: the job has had its "
                "`recoveryThreshold` of completed runs in a row (`incident_resolved` line, "
                "same `incident` as the opening one). Nothing to do.",
                [incidents],
                notify_on_close=False,
            )
            summaries = self.metrics["watchdog-summaries"]
            absent = absence_seconds(args.watchdog)
            self.alert_policies["watchdog-absent"] = policy(
                "watchdog-absent",
                "the run watchdog is not running",
                gcp.monitoring.AlertPolicyConditionArgs(
                    display_name=f"no watchdog summary for {ABSENT_PERIODS} of its periods",
                    condition_absent=gcp.monitoring.AlertPolicyConditionConditionAbsentArgs(
                        filter=f'metric.type="{args.metric_type("watchdog-summaries")}" AND '
                        'resource.type="cloud_run_revision"',
                        duration=duration_string(absent),
                        aggregations=[
                            gcp.monitoring.AlertPolicyConditionConditionAbsentAggregationArgs(
                                alignment_period="300s",
                                per_series_aligner="ALIGN_SUM",
                                cross_series_reducer="REDUCE_SUM",
                            )
                        ],
                        trigger=gcp.monitoring.AlertPolicyConditionConditionAbsentTriggerArgs(
                            count=1
                        ),
                    ),
                ),
                "WARNING",
                "The run watchdog logged no summary line for "
                f"{ABSENT_PERIODS} of its periods: missed or failed runs go unreported. Check "
                "its Scheduler job and function logs.",
                [summaries],
            )

        self.dashboard = gcp.monitoring.Dashboard(
            f"{name}-dashboard",
            project=project,
            dashboard_json=json.dumps(args.dashboard(), sort_keys=True),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(self.metrics.values())),
        )
        self.register_outputs({"dashboard": self.dashboard.id})
