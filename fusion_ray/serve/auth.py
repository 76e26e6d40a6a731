"""Bearer-token authentication, and who may read the unauthenticated ops endpoints."""

from __future__ import annotations

import hmac
import ipaddress

from fusion_ray.serve.limits import ApiError

LOOPBACK_NAMES = frozenset({"localhost"})


class BearerAuth:
    """The service's optional API token (``None``: the /v1 endpoints are open)."""

    def __init__(self, token: str | None) -> None:
        self.token = token

    @property
    def enabled(self) -> bool:
        return self.token is not None

    def valid(self, given: str | None) -> bool:
        """Whether ``given`` is the token (always, when none is configured); constant-time compare."""
        if self.token is None:
            return True
        return bool(given) and hmac.compare_digest(str(given).encode(), self.token.encode())

    def check(self, given: str | None) -> None:
        """401 with ``WWW-Authenticate: Bearer`` unless ``given`` is the token."""
        if not self.valid(given):
            raise ApiError(401, "unauthorized", "missing or wrong bearer token (Authorization: Bearer <token>)",
                           {"WWW-Authenticate": "Bearer"})


def is_loopback(host: str | None) -> bool:
    """127.0.0.0/8, ::1 or localhost."""
    if not host:
        return False
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def metrics_public(setting: bool | None, listen_host: str | None) -> bool:
    """Whether /metrics answers without the token: the setting, else only for a loopback listen address.

    ``listen_host`` is the bind host when it is known (``fusion-ray serve``), else the local
    address the request arrived on (a loopback bind accepts connections on loopback only).
    """
    if setting is not None:
        return setting
    return is_loopback(listen_host)
