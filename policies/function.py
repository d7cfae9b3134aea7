"""Resource policies for the Cloud Run function and Cloud Run services: dedicated runtime
and build accounts, internal ingress, Cloud Run's invoker check kept on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from policies.gcp import (
    CLOUD_RUN_V1_SERVICE,
    CLOUD_RUN_V2_SERVICE,
    FUNCTION_INTERNAL_INGRESS,
    FUNCTION_V1,
    FUNCTION_V2,
    RUN_V2_INTERNAL_INGRESS,
    is_default_build_account,
    is_default_runtime_account,
)
from policies.values import MISSING, get, is_unknown, known_str

_RUN_V1_INGRESS: Final = ("internal", "internal-and-cloud-load-balancing")
_V1_INGRESS_ANNOTATION: Final = "run.googleapis.com/ingress"
_INVOKER_IAM_DISABLED: Final = "run.googleapis.com/invoker-iam-disabled"


def _account_problem(value: Any, where: str, *, build: bool) -> list[str]:
    if is_unknown(value):
        return []  # an output of a (dedicated) account created in the same update
    if value is MISSING or (isinstance(value, str) and not value.strip()):
        fallback = "the Compute Engine default account" if not build else "a default account"
        return [f"{where} is not set, so {fallback} is used: set it to a dedicated service account"]
    email = known_str(value)
    if email is None:
        return []
    default = is_default_build_account(email) if build else is_default_runtime_account(email)
    if default:
        return [
            f"{where} {email!r} is a default service account (broad project roles): use a "
            "dedicated service account with only the roles the function needs"
        ]
    return []


def dedicated_runtime_account(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type == FUNCTION_V2:
        service = get(props, "serviceConfig")
        if is_unknown(service):
            return []
        return _account_problem(
            get(props, "serviceConfig", "serviceAccountEmail"),
            "serviceConfig.serviceAccountEmail",
            build=False,
        )
    if resource_type == FUNCTION_V1:
        return _account_problem(
            get(props, "serviceAccountEmail"), "serviceAccountEmail", build=False
        )
    if resource_type == CLOUD_RUN_V2_SERVICE:
        if is_unknown(get(props, "template")):
            return []
        return _account_problem(
            get(props, "template", "serviceAccount"), "template.serviceAccount", build=False
        )
    if resource_type == CLOUD_RUN_V1_SERVICE:
        if is_unknown(get(props, "template")) or is_unknown(get(props, "template", "spec")):
            return []
        return _account_problem(
            get(props, "template", "spec", "serviceAccountName"),
            "template.spec.serviceAccountName",
            build=False,
        )
    return []


def dedicated_build_account(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type != FUNCTION_V2:
        return []
    if is_unknown(get(props, "buildConfig")):
        return []
    return _account_problem(
        get(props, "buildConfig", "serviceAccount"), "buildConfig.serviceAccount", build=True
    )


def _ingress_problem(value: Any, where: str, allowed: tuple[str, str], default: str) -> list[str]:
    """An allow-list: anything but the two internal settings (unset, "", a typo, a value
    the pack does not know) lets traffic in from the internet or is not judgeable."""
    if is_unknown(value) or value in allowed:
        return []
    shown = f"unset (defaults to {default})" if value is MISSING else repr(value)
    return [
        f"{where} is {shown}: set {allowed[0]} (Cloud Scheduler counts as internal) or "
        f"{allowed[1]}"
    ]


def ingress_not_public(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type == FUNCTION_V2:
        if is_unknown(get(props, "serviceConfig")):
            return []
        return _ingress_problem(
            get(props, "serviceConfig", "ingressSettings"), "serviceConfig.ingressSettings",
            FUNCTION_INTERNAL_INGRESS, "ALLOW_ALL",
        )
    if resource_type == FUNCTION_V1:
        return _ingress_problem(
            get(props, "ingressSettings"), "ingressSettings", FUNCTION_INTERNAL_INGRESS, "ALLOW_ALL"
        )
    if resource_type == CLOUD_RUN_V2_SERVICE:
        return _ingress_problem(
            get(props, "ingress"), "ingress", RUN_V2_INTERNAL_INGRESS, "INGRESS_TRAFFIC_ALL"
        )
    if resource_type == CLOUD_RUN_V1_SERVICE:
        return _ingress_problem(
            get(props, "metadata", "annotations", _V1_INGRESS_ANNOTATION),
            f"the {_V1_INGRESS_ANNOTATION} annotation", _RUN_V1_INGRESS, "all",
        )
    return []


def invoker_iam_check_enabled(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Cloud Run's invoker check (run.routes.invoke) must stay on: without it anyone who
    reaches the service calls it, whatever the IAM grants say."""
    fix = "remove it (or set false) so Cloud Run checks run.routes.invoke on every request"
    problems: list[str] = []
    if resource_type == CLOUD_RUN_V2_SERVICE:
        if get(props, "invokerIamDisabled") is True:
            problems.append(f"invokerIamDisabled is true: {fix}")
        annotations = get(props, "annotations")
    elif resource_type == CLOUD_RUN_V1_SERVICE:
        annotations = get(props, "metadata", "annotations")
    else:
        return []
    flag = get(annotations, _INVOKER_IAM_DISABLED)
    if not is_unknown(flag) and flag is not MISSING and str(flag).strip().lower() != "false":
        problems.append(f"the {_INVOKER_IAM_DISABLED} annotation is {flag!r}: {fix}")
    return problems
