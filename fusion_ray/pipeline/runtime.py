"""Connecting to Ray: a local instance by default, or an existing cluster."""

from __future__ import annotations

import logging

import ray

log = logging.getLogger(__name__)


def connect(address: str | None = None, *, num_cpus: int | None = None, quiet: bool = True) -> None:
    """Start a local Ray instance (``address=None``) or join a cluster (``"auto"``, ``"ray://..."``)."""
    if ray.is_initialized():
        return
    kwargs: dict[str, object] = {"include_dashboard": False, "log_to_driver": not quiet}
    if address is None:
        kwargs["num_cpus"] = num_cpus
    else:
        kwargs["address"] = address
    log.info("connecting to Ray (%s)", address or "local")
    ray.init(**kwargs)  # type: ignore[arg-type]
