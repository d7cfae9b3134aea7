"""Resource policies for the Cloud Run function and Cloud Run services."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.gcp import (
    CLOUD_RUN_V1_SERVICE,
    CLOUD_RUN_V2_SERVICE,
    FUNCTION_V2,
    is_default_build_account,
    is_default_runtime_account,
)
from policies.values import MISSING, get, is_unknown, known_str

_INTERNAL_V1_INGRESS = frozenset({"internal", "internal-and-cloud-load-balancing"})


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


def ingress_not_public(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type == FUNCTION_V2:
        settings = get(props, "serviceConfig", "ingressSettings")
        if is_unknown(settings):
            return []
        if settings is MISSING or settings == "ALLOW_ALL":
            shown = "unset (defaults to ALLOW_ALL)" if settings is MISSING else "ALLOW_ALL"
            return [
                f"serviceConfig.ingressSettings is {shown}: set ALLOW_INTERNAL_ONLY (Cloud "
                "Scheduler counts as internal) or ALLOW_INTERNAL_AND_GCLB"
            ]
        return []
    if resource_type == CLOUD_RUN_V2_SERVICE:
        ingress = get(props, "ingress")
        if is_unknown(ingress):
            return []
        if ingress is MISSING or ingress == "INGRESS_TRAFFIC_ALL":
            shown = "unset (defaults to INGRESS_TRAFFIC_ALL)" if ingress is MISSING else ingress
            return [
                f"ingress is {shown}: set INGRESS_TRAFFIC_INTERNAL_ONLY or "
                "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"
            ]
        return []
    if resource_type == CLOUD_RUN_V1_SERVICE:
        ingress = get(props, "metadata", "annotations", "run.googleapis.com/ingress")
        if is_unknown(ingress):
            return []
        if ingress is MISSING or ingress not in _INTERNAL_V1_INGRESS:
            shown = "unset (defaults to all)" if ingress is MISSING else repr(ingress)
            return [
                f"the run.googleapis.com/ingress annotation is {shown}: set 'internal' or "
                "'internal-and-cloud-load-balancing'"
            ]
        return []
    return []
