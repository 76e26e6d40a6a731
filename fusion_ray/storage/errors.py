"""Storage errors: each names the location and the cause in one line.

``translate`` turns what pyarrow's filesystems raise (an ``OSError`` whose text carries the
AWS error name, a ``FileNotFoundError``) into one of these, so a job reports a missing object,
a missing bucket or refused credentials per item, in words a user can act on.
"""

from __future__ import annotations

import re

from fusion_ray.errors import InputError, one_line


class StorageError(InputError):
    """A location could not be read, listed or written."""


class LocationError(StorageError):
    """A URI or path is not a valid location (unknown scheme, bad bucket name, ``..`` in a key)."""


class ObjectNotFoundError(StorageError):
    """No file or object exists at the location."""


class BucketNotFoundError(ObjectNotFoundError):
    """The location's bucket does not exist."""


class StorageAccessError(StorageError):
    """The store refused the request: wrong or missing credentials, or no permission."""


class StorageUnavailableError(StorageError):
    """The store could not be reached (endpoint down, DNS, timeout)."""


_ACCESS = re.compile(r"ACCESS_DENIED|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|"
                     r"AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|EXPIRED_TOKEN|"
                     r"ExpiredToken|\b403\b|Permission denied|PERMISSION_DENIED", re.IGNORECASE)
_NETWORK = re.compile(r"NETWORK_CONNECTION|Couldn't connect|Could not connect|Connection refused|"
                      r"Timeout was reached|Could not resolve host|UNAVAILABLE", re.IGNORECASE)
_NO_BUCKET = re.compile(r"NO_SUCH_BUCKET|NoSuchBucket|Bucket '[^']*' not found", re.IGNORECASE)
_AWS_ERROR = re.compile(r"AWS Error (\w+) during (\w+) operation")
ACCESS_HINT = "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket's permissions"


def _cause(exc: BaseException) -> str:
    """The short cause inside a pyarrow error text ('ACCESS_DENIED during HeadObject')."""
    text = one_line(str(exc))
    found = _AWS_ERROR.search(text)
    if found:
        return f"{found.group(1)} during {found.group(2)}"
    return text or type(exc).__name__


def translate(exc: BaseException, where: str, action: str) -> StorageError:
    """A StorageError for ``exc`` raised while ``action`` (e.g. 'read') ``where`` (a URI or path).

    A StorageError passes through unchanged. A not-found error becomes ObjectNotFoundError
    (the caller checks the bucket and raises BucketNotFoundError when that is the cause).
    """
    if isinstance(exc, StorageError):
        return exc
    text = str(exc)
    if _NO_BUCKET.search(text):
        return BucketNotFoundError(f"{where}: no such bucket ({_cause(exc)})")
    if isinstance(exc, FileNotFoundError):
        return ObjectNotFoundError(f"{where}: no such file or object")
    if isinstance(exc, PermissionError) or _ACCESS.search(text):
        return StorageAccessError(f"{where}: access denied to {action} ({_cause(exc)}); {ACCESS_HINT}")
    if _NETWORK.search(text):
        return StorageUnavailableError(f"{where}: cannot reach the store to {action} ({_cause(exc)})")
    return StorageError(f"{where}: cannot {action}: {_cause(exc)}")
