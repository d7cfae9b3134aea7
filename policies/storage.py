"""Resource policies for Cloud Storage buckets (the function's source bucket)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.gcp import STORAGE_BUCKET
from policies.values import MISSING, get, is_unknown


def uniform_bucket_level_access(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type != STORAGE_BUCKET:
        return []
    value = get(props, "uniformBucketLevelAccess")
    if is_unknown(value) or value is True:
        return []
    shown = "unset (defaults to false)" if value is MISSING else repr(value)
    return [
        f"uniformBucketLevelAccess is {shown}: set it to true so only IAM (no object ACLs) "
        "controls access"
    ]


def public_access_prevention(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type != STORAGE_BUCKET:
        return []
    value = get(props, "publicAccessPrevention")
    if is_unknown(value) or value == "enforced":
        return []
    shown = "unset (defaults to inherited)" if value is MISSING else repr(value)
    return [f'publicAccessPrevention is {shown}: set it to "enforced"']
