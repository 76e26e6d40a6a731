"""The bounded store of registered source identities (shared by Serve and the in-process live host)."""

import numpy as np

from fusion_ray.core.source_store import SourceStore
from fusion_ray.types import SourceIdentity


def _identity(k: int) -> SourceIdentity:
    return SourceIdentity(embedding=None, latent=np.full(512, k, np.float32), crop=None, num_images=k)


def test_source_store_is_a_bounded_lru():
    store = SourceStore(2)
    a, b = store.put(_identity(1)), store.put(_identity(2))
    assert a != b and store.get(a).num_images == 1  # a is now the most recent
    c = store.put(_identity(3))
    assert store.get(b) is None and store.get(a) is not None and store.get(c) is not None
    assert len(store) == 2 and store.evicted == 1
    assert store.delete(a) and not store.delete(a)


def test_deleted_ids_are_remembered_evicted_ones_are_not():
    store = SourceStore(2)
    a, b = store.put(_identity(1)), store.put(_identity(2))
    store.delete(a)
    store.put(_identity(3))
    store.put(_identity(4))  # b evicted for capacity: not "deleted"
    assert store.deleted_of({a, b, "src_other"}) == {a}
