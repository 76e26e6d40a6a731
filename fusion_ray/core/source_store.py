"""A bounded store of source identities (least recently used are dropped first)."""

from __future__ import annotations

import secrets
from collections import OrderedDict

from fusion_ray.types import SourceIdentity


class SourceStore:
    """Identity by id, at most ``max_count`` of them; memory is max_count x ~4 KB (two 512-d vectors).

    The ids of the last ``max_count`` deleted identities are kept (ids are random and never
    reused), so streams still using one can be told it was deleted (:meth:`deleted_of`); an
    identity dropped for capacity is not "deleted": a stream holding it goes on.
    """

    def __init__(self, max_count: int) -> None:
        if max_count < 1:
            raise ValueError(f"max_count: expected at least 1, got {max_count}")
        self.max_count = max_count
        self._items: OrderedDict[str, SourceIdentity] = OrderedDict()
        self._deleted: OrderedDict[str, None] = OrderedDict()
        self.evicted = 0

    def put(self, identity: SourceIdentity) -> str:
        source_id = "src_" + secrets.token_hex(12)
        self._items[source_id] = identity
        while len(self._items) > self.max_count:
            self._items.popitem(last=False)
            self.evicted += 1
        return source_id

    def get(self, source_id: str) -> SourceIdentity | None:
        identity = self._items.get(source_id)
        if identity is not None:
            self._items.move_to_end(source_id)
        return identity

    def delete(self, source_id: str) -> bool:
        if self._items.pop(source_id, None) is None:
            return False
        self._deleted[source_id] = None
        while len(self._deleted) > self.max_count:
            self._deleted.popitem(last=False)
        return True

    def deleted_of(self, source_ids: set[str] | frozenset[str]) -> frozenset[str]:
        """Those of ``source_ids`` deleted (among the last ``max_count`` deletions)."""
        return frozenset(i for i in source_ids if i in self._deleted)

    def __len__(self) -> int:
        return len(self._items)
