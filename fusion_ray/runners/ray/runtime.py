"""Connecting to Ray: a local instance by default, or an existing cluster."""

from __future__ import annotations

import logging

import ray

log = logging.getLogger(__name__)


LOCAL_OBJECT_STORE_MB = 1024
"""Object store of a local Ray instance. Ray's default (30% of RAM) lets the shared-memory
arena's touched pages grow with a job's length; a fixed store keeps memory flat (the
pipeline keeps far less than this in flight). Cluster nodes set theirs in ``ray start``."""


def connect(address: str | None = None, *, num_cpus: int | None = None, quiet: bool = True,
            object_store_mb: int | None = LOCAL_OBJECT_STORE_MB) -> None:
    """Start a local Ray instance (``address=None``) or join a cluster (``"auto"``, ``"ray://..."``)."""
    if ray.is_initialized():
        return
    kwargs: dict[str, object] = {"include_dashboard": False, "log_to_driver": not quiet}
    if address is None:
        kwargs["num_cpus"] = num_cpus
        if object_store_mb is not None:
            kwargs["object_store_memory"] = object_store_mb * 2**20
    else:
        kwargs["address"] = address
    log.info("connecting to Ray (%s)", address or "local")
    ray.init(**kwargs)  # type: ignore[arg-type]
