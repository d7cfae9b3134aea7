"""Import a Google client library's message types without its client.

`import google.cloud.scheduler_v1.types` first runs the package's `__init__`, which imports
the gRPC and REST clients, google.auth, requests and google.api_core (whose Python-version
notice alone scans every installed distribution): about a second for the contract checks'
nine libraries, against about 0.2 s for their message types alone.

`import_types("google.cloud.scheduler_v1.types")` registers the package
`google.cloud.scheduler_v1` as a `DeferredPackage` (its real spec and path, its `__init__`
not yet run), imports the `types` subpackage under it, and leaves the package in place:
the first attribute anything asks of it that is not there yet (`CloudSchedulerClient`,
`__version__`) runs the real `__init__` in that same module object. So a later
`from google.cloud.scheduler_v1 import CloudSchedulerClient` gets the real package, whose
types are the very classes loaded here. A package already imported is used as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_LOCK = threading.RLock()


class DeferredPackage(ModuleType):
    """A package whose `__init__` runs on the first missing attribute asked of it."""

    _initialized: bool

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not (yet) set: run the real __init__ once, then
        # answer from what it set.
        with _LOCK:
            if self.__dict__.get("_initialized", True):
                raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
            self.__dict__["_initialized"] = True
            spec = self.__spec__
            assert spec is not None and spec.loader is not None
            try:
                spec.loader.exec_module(self)
            except BaseException:
                self.__dict__["_initialized"] = False  # the next access raises it again
                raise
        return object.__getattribute__(self, name)


def import_types(module: str) -> ModuleType:
    """`importlib.import_module(module)` for `<package>.types[.<name>]`, without running the
    package's `__init__` until something else needs it (see the module docstring)."""
    package_name, marker, _ = module.partition(".types")
    if not marker or package_name in sys.modules:
        return importlib.import_module(module)
    with _LOCK:
        if package_name not in sys.modules:
            _register_deferred(package_name)
    return importlib.import_module(module)


def _register_deferred(package_name: str) -> None:
    spec = importlib.util.find_spec(package_name)
    if spec is None or spec.submodule_search_locations is None or spec.loader is None:
        importlib.import_module(package_name)  # not a package: import it plainly
        return
    package = DeferredPackage(package_name)
    package.__dict__.update(
        __spec__=spec, __loader__=spec.loader, __file__=spec.origin,
        __path__=list(spec.submodule_search_locations), __package__=package_name,
        _initialized=False,
    )
    sys.modules[package_name] = package
    parent_name, _, child = package_name.rpartition(".")
    if parent_name:
        # What the import system does for a package it loads: bind it in its parent.
        setattr(importlib.import_module(parent_name), child, package)
