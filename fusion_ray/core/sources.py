"""A bounded store of source identities (least recently used are dropped first)."""

from __future__ import annotations

import secrets
from collections import OrderedDict

from fusion_ray.types import SourceIdentity


class SourceStore:
    """Identity by id, at most ``max_count`` of them; memory is max_count x ~4 KB (two 512-d vectors)."""

    def __init__(self, max_count: int) -> None:
        if max_count < 1:
            raise ValueError(f"max_count: expected at least 1, got {max_count}")
        self.max_count = max_count
        self._items: OrderedDict[str, SourceIdentity] = OrderedDict()
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
        return self._items.pop(source_id, None) is not None

    def __len__(self) -> int:
        return len(self._items)
