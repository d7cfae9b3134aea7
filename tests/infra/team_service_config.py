"""The retail example's config as a dict, and the problems `load_config` finds in it once
changed: what the tests of team services' config rules share."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from infra.config import ConfigError, load_config
from operator_tools.offline import load_stack_config
from tests.stacks import FIXTURE_STACKS_DIR

Config = dict[str, Any]
SERVICES = "scheduler-dedup:services"
JOBS = "scheduler-dedup:jobs"
PROJECT = "acme-retail-prod"
EXPORTS_URL = "https://exports-api-4k2xq7wbqa-uw.a.run.app"
EXPORTS_ACCOUNT = f"exports-api@{PROJECT}.iam.gserviceaccount.com"
STOREFRONT_ACCOUNT = f"storefront@{PROJECT}.iam.gserviceaccount.com"
INVOKER = f"retail-invoker@{PROJECT}.iam.gserviceaccount.com"
WATCHDOG = f"retail-watchdog@{PROJECT}.iam.gserviceaccount.com"


def retail_config() -> Config:
    return copy.deepcopy(dict(load_stack_config("retail", FIXTURE_STACKS_DIR)))


def problems(change: Callable[[Config], None]) -> dict[str, str]:
    """The retail example with `change`: each problem's key -> its texts (what and fix)."""
    raw = retail_config()
    change(raw)
    with pytest.raises(ConfigError) as caught:
        load_config(raw)
    found: dict[str, str] = {}
    for p in caught.value.problems:
        key = p.key.removeprefix("scheduler-dedup:")
        found[key] = f"{found.get(key, '')}\n{p.message}. Fix: {p.fix}".strip()
    return found


def service(raw: Config, name: str) -> dict[str, Any]:
    return next(s for s in raw[SERVICES] if s["name"] == name)


def job(raw: Config, name: str) -> dict[str, Any]:
    return next(j for j in raw[JOBS] if j["name"] == name)
