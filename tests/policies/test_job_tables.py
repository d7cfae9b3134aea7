"""The policies read a function's job table from its declared source object, in both forms
the archive arrives in: the offline mocks' descriptor and pulumi_policy's FileAsset."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest
from pulumi_policy.deserialize import deserialize_properties

from infra.source import PROXY_ROUTES_TABLE, WATCH_JOBS_TABLE, table_files, write_source_archive
from policies.job_tables import BUCKET_OBJECT, job_table, source_object
from policies.kit_resources import is_proxy_function, targets
from policies.model import Resource
from policies.values import MISSING, UNKNOWN, UNKNOWN_STRING
from tests.policies.fixtures import (
    PROXY_ROUTES,
    PROXY_SOURCE,
    WORKFLOW,
    proxy_stack,
    replace_named,
)

PROXY_FN = "proxy-function"


def _proxy(resources: list[Resource]) -> Resource:
    return next(r for r in resources if r.name == PROXY_FN)


def test_the_fixture_proxy_reads_its_routes_from_its_archive() -> None:
    stack = proxy_stack()
    proxy = _proxy(stack)
    assert source_object(proxy, stack) is not None
    assert job_table(proxy, stack, PROXY_ROUTES_TABLE) == PROXY_ROUTES
    assert job_table(proxy, stack, WATCH_JOBS_TABLE) is MISSING
    found = targets(proxy, stack)
    assert found is not None and {t.resource_id for t in found} == {
        r["resource"].rsplit("/", 1)[1] for r in PROXY_ROUTES.values()}


def test_under_preview_the_archive_is_a_file_asset(tmp_path: Path) -> None:
    """pulumi preview hands the policies the object's `source` as pulumi_policy deserializes
    it: a pulumi.FileAsset whose path is the archive the program wrote."""
    source = tmp_path / "function"
    source.mkdir()
    (source / "main.py").write_text("")
    routes = {"j": {"target": "workflow", "resource": WORKFLOW}}
    archive, path = write_source_archive(
        source, tmp_path / "build", table_files(PROXY_ROUTES_TABLE, routes))
    wire = {"name": archive.object_name, "bucket": "src-bucket", "source": {
        "4dabf18193072939515e22adb298388d": "c44067f5952c0a294b673a41bacd8c17",
        "path": str(path)}}
    props = deserialize_properties(wire)
    assert isinstance(props["source"], pulumi.FileAsset)
    stack = replace_named(
        replace_named(proxy_stack(), PROXY_SOURCE, "source", props["source"]),
        PROXY_FN, "buildConfig.source.storageSource.object", archive.object_name)
    stack = replace_named(stack, PROXY_SOURCE, "name", archive.object_name)
    assert job_table(_proxy(stack), stack, PROXY_ROUTES_TABLE) == routes


@pytest.mark.parametrize(("path", "value"), [
    ("source", UNKNOWN_STRING),  # the asset not known yet
    ("source", {"__asset": "file", "path": "/nonexistent/archive.zip"}),  # not here
    ("source", {"__asset": "RemoteAsset"}),  # not a local file
    ("name", "another.zip"),  # the function names no declared object
])
def test_an_unreadable_table_is_unknown_never_empty(path: str, value: object) -> None:
    """Unknown, not MISSING: a policy then judges less, never wrongly that there are no
    routes."""
    stack = replace_named(proxy_stack(), PROXY_SOURCE, path, value)
    proxy = _proxy(stack)
    assert job_table(proxy, stack, PROXY_ROUTES_TABLE) is UNKNOWN
    assert targets(proxy, stack) is None


def test_a_function_with_the_proxys_table_is_the_proxy() -> None:
    """Another entry point and no DEDUP_PROXY_* setting: its archive's table says it."""
    stack = proxy_stack()
    proxy = replace_named(stack, PROXY_FN, "buildConfig.entryPoint", "main")
    env = dict(_proxy(proxy).props["serviceConfig"]["environmentVariables"])
    plain = {k: v for k, v in env.items() if not k.startswith("DEDUP_PROXY_")}
    stack = replace_named(proxy, PROXY_FN, "serviceConfig.environmentVariables", plain)
    assert is_proxy_function(_proxy(stack), stack)
    assert not is_proxy_function(_proxy(stack))  # without the stack it cannot tell
    other = [r for r in stack if r.type != BUCKET_OBJECT]
    assert not is_proxy_function(_proxy(other), other)
