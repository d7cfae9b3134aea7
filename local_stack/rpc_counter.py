"""Count Firestore RPCs by wrapping the client's generated API methods."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from google.cloud import firestore

RPC_METHODS = (
    "batch_get_documents", "begin_transaction", "commit", "rollback", "run_query",
    "batch_write", "get_document", "list_documents", "update_document", "delete_document",
    "create_document", "run_aggregation_query",
)


class RpcCounter:
    """Wraps every RPC method of one client; `counts` says which ran how often."""

    def __init__(self, client: firestore.Client) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        api = client._firestore_api
        for name in RPC_METHODS:
            original = getattr(api, name, None)
            if original is not None:
                setattr(api, name, self._wrap(name, original))

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.counts[name] += 1
            return original(*args, **kwargs)

        return counted

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        self.counts.clear()
