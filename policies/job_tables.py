"""The kit's job tables (per-job routes, the watch list), as the policies read them.

A function of the kit gets its per-job data as a JSON file in its own source archive
(function/dedup/tables.py, infra/source.py), not in its environment (32 KiB per function).
The policies read the same bytes the function will: the function names its source object
(`buildConfig.source.storageSource`: bucket and object), the stack declares that
`gcp:storage/bucketObject:BucketObject`, whose `source` is the archive. Offline the mocks
hand it over as `{"__asset": "file", "path": ...}`; under `pulumi preview` pulumi_policy
deserializes it as a `pulumi.FileAsset` with `.path` (the program writes the archive before
declaring the object, by its absolute path, and the stack policies run after the program).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any, Final

from infra.source import read_archive_table
from policies.gcp import FUNCTION_V2
from policies.model import Resource
from policies.values import MISSING, UNKNOWN, get, is_unknown, known_str

BUCKET_OBJECT: Final = "gcp:storage/bucketObject:BucketObject"


def source_object(function: Resource, resources: Sequence[Resource]) -> Resource | None:
    """The BucketObject of the stack that `function` is built from (same object name, and
    bucket when both are known); None if it names none the stack declares, or is unknown."""
    if function.type != FUNCTION_V2:
        return None
    storage = get(function.props, "buildConfig", "source", "storageSource")
    name, bucket = known_str(get(storage, "object")), known_str(get(storage, "bucket"))
    if name is None:
        return None
    for resource in resources:
        if resource.type != BUCKET_OBJECT or known_str(get(resource.props, "name")) != name:
            continue
        declared_bucket = known_str(get(resource.props, "bucket"))
        if bucket is None or declared_bucket is None or declared_bucket == bucket:
            return resource
    return None


def _archive_path(asset: Any) -> str | None:
    """The local path of a file asset, as the engine (`.path`) or the mocks (a dict) give it."""
    path = asset.get("path") if isinstance(asset, Mapping) else getattr(asset, "path", None)
    return str(path) if isinstance(path, str | PathLike) and str(path) else None


def job_table(function: Resource, resources: Sequence[Resource], table: str) -> Any:
    """The parsed job table `table` (infra.source's *_TABLE names) of `function`: the JSON
    value; MISSING when its archive has no such table (the function reads none); UNKNOWN
    when it cannot be read here (no declared source object, an asset not known yet or not
    a local file, an unreadable archive, or not JSON: the function refuses to start then)."""
    declared = source_object(function, resources)
    if declared is None:
        return UNKNOWN
    asset = get(declared.props, "source")
    if is_unknown(asset):
        return UNKNOWN
    path = _archive_path(asset)
    if path is None:
        return UNKNOWN
    try:
        text = read_archive_table(path, table)
    except (OSError, zipfile.BadZipFile):
        return UNKNOWN
    if text is None:
        return MISSING
    try:
        return json.loads(text)
    except ValueError:
        return UNKNOWN
