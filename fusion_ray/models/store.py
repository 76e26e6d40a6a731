"""The model store: find, verify and download the registered model files.

Layout of a models directory (``resolve_models_dir``)::

    inswapper_128.onnx          the weights
    inswapper_128.hash          CRC32 published beside the file (8 lower-case hex digits)
    inswapper_128.onnx.sha256   our hash record: {"sha256", "size", "mtime_ns", "source"}
    inswapper_128.onnx.part     an unfinished download (resumed by the next download)

Integrity has three levels, reported as :attr:`LocatedModel.status`:

``verified``
    a hash record exists and the file matches it;
``crc32-verified``
    no record yet, but a ``.hash`` file beside the model matched its CRC32 (a record is then
    written, so the next look-up is ``verified``);
``unverified``
    a hand-placed file with neither: usable, with a logged warning, because nothing offline
    can say whether it is the right file.

Hashing and the records live in :mod:`fusion_ray.models.hashes`, the HTTP transfer in
:mod:`fusion_ray.models.download`; this module decides what to trust, fetch and keep.

The store never prints; it logs through ``logging`` and raises the typed errors of
:mod:`fusion_ray.errors`. It holds no global mutable state: everything hangs off a
:class:`ModelStore` instance built from explicit arguments.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from fusion_ray.errors import DownloadError, ModelError, ModelIntegrityError, ModelMissingError
from fusion_ray.fsutil import user_cache_dir
from fusion_ray.models.download import DEFAULT_TIMEOUT_S, Downloader, ProgressCallback
from fusion_ray.models.hashes import (
    CHUNK_SIZE,
    RecordSource,
    atomic_write_text,
    crc32_file,
    file_digests,
    hash_file_path,
    read_crc_file,
    read_hash_record,
    record_path,
    sha256_file,
    write_record,
)

# Re-exported for fusion_ray.bench.notebook (being rewritten elsewhere); new code imports it
# from fusion_ray.models.hashes.
from fusion_ray.models.hashes import write_hash_record as write_hash_record
from fusion_ray.models.onnx_info import is_stand_in_metadata, read_model_metadata
from fusion_ray.models.registry import ModelSpec, all_specs, get_spec, optional_specs

logger = logging.getLogger(__name__)

ModelStatus = Literal["verified", "crc32-verified", "unverified"]

ENV_MODELS_DIR = "FUSION_RAY_MODELS"
"""Environment variable naming the models directory (after an explicit ``--models-dir``)."""


# --------------------------------------------------------------------------- directories


def resolve_models_dir(explicit: Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The models directory: ``explicit`` (the CLI's ``--models-dir``), else ``$FUSION_RAY_MODELS``,
    else the per-user cache ``$XDG_CACHE_HOME/fusion_ray/models`` (``~/.cache`` when unset).

    ``env`` defaults to ``os.environ``; pass a mapping to resolve without touching the process
    environment. Nothing is created on disk.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    if explicit is not None:
        return Path(explicit).expanduser()
    from_env = environ.get(ENV_MODELS_DIR, "").strip()
    if from_env:
        return Path(from_env).expanduser()
    return user_cache_dir(environ) / "models"


# --------------------------------------------------------------------------- store


@dataclass(frozen=True)
class LocatedModel:
    """A model file that exists, and how far its integrity was established."""

    name: str
    path: Path
    status: ModelStatus
    sha256: str | None = None
    """The file's sha256 when known (from the record or computed); ``None`` if not hashed."""


class ModelStore:
    """The registered models in one directory, plus per-model path overrides.

    ``root`` is the models directory (see :func:`resolve_models_dir`); ``overrides`` maps a
    model name to an explicit file, e.g. the real detector at
    ``../shared/assets/models/scrfd_2.5g.onnx``. ``chunk_size`` and ``timeout_s`` tune hashing
    reads and downloads.
    """

    def __init__(
        self,
        root: Path,
        overrides: Mapping[str, Path] | None = None,
        *,
        chunk_size: int = CHUNK_SIZE,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size: expected a positive int, got {chunk_size}")
        self.root = Path(root)
        for name in overrides or {}:
            get_spec(name)  # an override for an unknown model is a typo: say so now
        self.overrides: Mapping[str, Path] = MappingProxyType(
            {name: Path(p).expanduser() for name, p in (overrides or {}).items()}
        )
        self.chunk_size = chunk_size
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"ModelStore(root={str(self.root)!r}, overrides={dict(self.overrides)!r})"

    # ----------------------------------------------------------------- look-up

    def path_for(self, name: str) -> Path:
        """Where model ``name`` is expected: its override, else ``root / file_name``."""
        spec = get_spec(name)
        return self.overrides.get(name, self.root / spec.file_name)

    def locate(self, name: str) -> LocatedModel:
        """Find model ``name`` and establish its integrity as cheaply as is safe.

        Fast path: a hash record whose size and mtime_ns match the file is trusted without
        re-hashing (a change that keeps both is not detected here; :meth:`verify` re-hashes).
        A record that no longer matches size or mtime triggers a full re-hash: same content
        refreshes the record, different content raises :class:`ModelIntegrityError`. With no
        record, a ``.hash`` beside the file is checked (CRC32) and a record written. With
        neither, the file is returned as ``"unverified"`` with a logged warning.

        Raises :class:`ModelMissingError` (with the path, the expected hash and the fix) when the
        file is absent.
        """
        spec = get_spec(name)
        path = self.path_for(name)
        if not path.is_file():
            raise self._missing_error(spec, path)
        return self._check(spec, path, full=False, warn=True)

    def verify(self, name: str) -> LocatedModel:
        """Like :meth:`locate` but always re-hashes the whole file (sha256, and CRC32 when a
        ``.hash`` file is beside it), whatever the record's size and mtime say."""
        spec = get_spec(name)
        path = self.path_for(name)
        if not path.is_file():
            raise self._missing_error(spec, path)
        return self._check(spec, path, full=True, warn=True)

    def status_rows(self) -> list[dict[str, Any]]:
        """One row per registry row (the standard set's, then the optional ones) for ``fusion-ray
        models list``.

        Keys: ``name``, ``kind``, ``standard`` (in the standard set ``models download`` fetches),
        ``file``, ``present``, ``packaged`` (found where its Python package installed it: dlib_68),
        ``stand_in`` (the file is a labelled fusion_ray stand-in), ``status`` (``"missing"``,
        ``"verified"``, ``"crc32-verified"``, ``"unverified"`` or ``"corrupt"``), ``size`` (bytes,
        ``None`` when missing), ``approx_size_mb``, ``licence``, ``licence_url``, ``detail`` (the
        error text of a corrupt file, else ``None``). Logs no warnings.
        """
        return [self._status_row(spec) for spec in (*all_specs(), *optional_specs())]

    def _status_row(self, spec: ModelSpec) -> dict[str, Any]:
        path = self.path_for(spec.name)
        packaged = False
        if spec.name == "dlib_68" and not path.is_file():
            from fusion_ray.models.landmarker import dlib_68_path

            with contextlib.suppress(ModelError):  # the [landmarks] extra is not installed
                path, packaged = dlib_68_path(), True
        present = path.is_file()
        status = "missing"
        detail: str | None = None
        size: int | None = None
        stand_in = False
        if present:
            size = path.stat().st_size
            try:
                status = self._check(spec, path, full=False, warn=False).status
            except ModelError as exc:
                status, detail = "corrupt", str(exc)
            with contextlib.suppress(ModelError):  # not a readable ONNX file: not a stand-in either
                stand_in = path.suffix == ".onnx" and is_stand_in_metadata(read_model_metadata(path))
        return {"name": spec.name, "kind": spec.kind, "standard": spec.default_set, "file": str(path),
                "present": present, "packaged": packaged, "stand_in": stand_in, "status": status, "size": size,
                "approx_size_mb": spec.approx_size_mb, "licence": spec.licence, "licence_url": spec.licence_url,
                "detail": detail}

    # ----------------------------------------------------------------- download

    def download(
        self,
        name: str,
        *,
        progress: ProgressCallback | None = None,
        opener: Callable[..., Any] | None = None,
        force: bool = False,
    ) -> LocatedModel:
        """Download model ``name`` into :meth:`path_for` and return it as ``"verified"``.

        Order: nothing is fetched when the file is present and verified (unless ``force``);
        the published ``.hash`` (CRC32) is fetched first; a present but unverified file whose
        CRC32 matches it is kept (record written, no model download); otherwise the model is
        fetched into ``<file>.part``, resuming an existing ``.part`` with a ``Range`` request
        (appended on 206, restarted from zero on 200), its CRC32 checked, renamed into place
        atomically, and the ``.hash`` and sha256 record written beside it.

        ``progress(bytes_done, total_or_None)`` is called as chunks arrive. ``opener`` is called
        as ``opener(request, timeout=...)`` and must return a response like
        ``urllib.request.urlopen`` does (the default). Network failures raise
        :class:`DownloadError` naming the URL (an interrupted ``.part`` is kept for resuming);
        a CRC32 mismatch deletes the ``.part`` and raises :class:`ModelIntegrityError`.
        """
        spec = get_spec(name)
        if not spec.hash_url:
            raise DownloadError(f"{spec.name} is not downloaded by fusion-ray: {spec.hash_source}")
        dest = self.path_for(name)
        present = None if force or not dest.is_file() else self._present(spec, dest)
        if present is not None and present.status != "unverified":
            logger.info("%s is already present and verified at %s", name, dest)
            return present

        logger.info(
            "downloading %s (about %.0f MB) from %s; licence: %s (%s)",
            name, spec.approx_size_mb, spec.url, spec.licence, spec.licence_url,
        )
        downloader = Downloader(opener, chunk_size=self.chunk_size, timeout_s=self.timeout_s)
        expected_crc = downloader.fetch_crc(spec)
        if present is not None and crc32_file(dest, self.chunk_size) == expected_crc:
            return self._keep_present(spec, dest, expected_crc)
        sha = downloader.download_to(spec, dest, expected_crc, progress)
        logger.info("downloaded %s to %s (sha256 %s)", name, dest, sha)
        return LocatedModel(spec.name, dest, "verified", sha)

    def _present(self, spec: ModelSpec, dest: Path) -> LocatedModel | None:
        """The file already at ``dest`` as :meth:`locate` sees it (without the warning), or
        ``None`` when it fails its check and a fresh copy must be downloaded."""
        try:
            return self._check(spec, dest, full=False, warn=False)
        except ModelError as exc:
            logger.warning("%s; downloading a fresh copy", exc)
            return None

    def _keep_present(self, spec: ModelSpec, dest: Path, expected_crc: str) -> LocatedModel:
        """Keep an unverified file that matches the published CRC32: write its ``.hash`` and record."""
        logger.info("%s at %s matches the published CRC32; keeping it", spec.name, dest)
        self._try_write_text(hash_file_path(dest), expected_crc)
        sha = sha256_file(dest, self.chunk_size)
        self._try_write_record(dest, "crc32-verified", sha)
        return LocatedModel(spec.name, dest, "crc32-verified", sha)

    # ----------------------------------------------------------------- internals

    def _check(self, spec: ModelSpec, path: Path, *, full: bool, warn: bool) -> LocatedModel:
        stat = path.stat()
        record = read_hash_record(path)
        if (
            record is not None
            and not full
            and record.size == stat.st_size
            and record.mtime_ns == stat.st_mtime_ns
        ):
            return LocatedModel(spec.name, path, "verified", record.sha256)

        expected_crc = read_crc_file(hash_file_path(path))
        if record is None and expected_crc is None and not full:
            if warn:
                self._warn_unverified(spec, path)
            return LocatedModel(spec.name, path, "unverified")

        digests = file_digests(path, self.chunk_size)
        if record is not None and digests.sha256 != record.sha256:
            raise ModelIntegrityError(
                f"model {spec.name!r} at {path} does not match its hash record "
                f"{record_path(path)}: expected sha256 {record.sha256}, got {digests.sha256}. "
                f"Fix: delete {path} and re-download it with `fusion-ray models download {spec.name}`."
            )
        if expected_crc is not None and digests.crc32 != expected_crc:
            raise ModelIntegrityError(
                f"model {spec.name!r} at {path} does not match {hash_file_path(path)}: "
                f"expected CRC32 {expected_crc}, got {digests.crc32}. "
                f"Fix: delete {path} and re-download it with `fusion-ray models download {spec.name}`."
            )
        if record is not None:
            if (record.size, record.mtime_ns) != (stat.st_size, stat.st_mtime_ns):
                # Same content, new mtime (copied or touched): refresh the fast-path keys.
                self._try_write_record(path, record.source, digests.sha256)
            return LocatedModel(spec.name, path, "verified", digests.sha256)
        if expected_crc is not None:
            self._try_write_record(path, "crc32-verified", digests.sha256)
            return LocatedModel(spec.name, path, "crc32-verified", digests.sha256)
        if warn:
            self._warn_unverified(spec, path)
        return LocatedModel(spec.name, path, "unverified", digests.sha256)

    def _warn_unverified(self, spec: ModelSpec, path: Path) -> None:
        logger.warning(
            "model %r at %s is unverified: it has no hash record (%s) and no CRC32 file (%s) "
            "beside it, so its integrity could not be checked offline. To check it, run "
            "`fusion-ray models download %s` (it fetches the published CRC32 from %s and keeps "
            "this file without re-downloading it if it matches), or save that .hash file as %s.",
            spec.name, path, record_path(path).name, hash_file_path(path).name,
            spec.name, spec.hash_url, hash_file_path(path),
        )

    def _missing_error(self, spec: ModelSpec, path: Path) -> ModelMissingError:
        hash_path = hash_file_path(path)
        try:
            expected_crc = read_crc_file(hash_path)
        except ModelError:
            expected_crc = None
        expected = (
            f"expected CRC32 {expected_crc} from {hash_path}"
            if expected_crc is not None
            else "expected hash: recorded on download"
        )
        origin = " (set by an override)" if spec.name in self.overrides else ""
        size = f"about {spec.approx_size_mb:.0f} MB " if spec.approx_size_mb > 0 else ""
        return ModelMissingError(
            f"model {spec.name!r} not found at {path}{origin} ({expected}). "
            f"Fix: run `fusion-ray models download {spec.name}` ({size}from {spec.url}; licence: "
            f"{spec.licence}), or place the file at {path}."
        )

    def _try_write_record(self, path: Path, source: RecordSource, sha256: str) -> None:
        try:
            write_record(path, source, sha256)
        except OSError as exc:
            logger.info("could not write the hash record beside %s (%s); it is re-checked next time", path, exc)

    def _try_write_text(self, path: Path, text: str) -> None:
        try:
            atomic_write_text(path, text)
        except OSError as exc:
            logger.info("could not write %s: %s", path, exc)
