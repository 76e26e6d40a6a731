"""One storage layer for local paths and object stores (``s3://``, ``gs://``), over pyarrow's
filesystems (the ones Ray Data uses).

- ``location``: ``Location`` values (parse, join, ``is_under``/``confine`` for an output
  root, glob matching), pure and without I/O;
- ``config``: ``StorageConfig.from_env(os.environ)`` (the standard AWS variables) and the
  filesystems it builds;
- ``store``: ``Storage`` (seekable ranged reads for PyAV, ``read_bytes``, ``stat``,
  ``exists``, ``glob``, ``publish``/``write_bytes_atomic``/``open_output`` that never leave
  a partial output under its name);
- ``errors``: the typed errors (InputError subclasses), one line naming the location.
"""

from fusion_ray.storage.config import GcsSettings, S3Settings, StorageConfig, make_filesystem
from fusion_ray.storage.errors import (
    BucketNotFoundError,
    LocationError,
    ObjectNotFoundError,
    StorageAccessError,
    StorageError,
    StorageUnavailableError,
)
from fusion_ray.storage.location import Location, confine, is_under, parse_location
from fusion_ray.storage.store import ObjectStat, Storage

__all__ = [
    "BucketNotFoundError", "GcsSettings", "Location", "LocationError", "ObjectNotFoundError",
    "ObjectStat", "S3Settings", "Storage", "StorageAccessError", "StorageConfig", "StorageError",
    "StorageUnavailableError", "confine", "is_under", "make_filesystem", "parse_location",
]
