"""Job items from a manifest (CSV or Parquet) or from FaceFusion-style batch patterns.

A manifest, its sources and targets, and the patterns may be local paths or URIs of objects
in a bucket (``s3://``, ``gs://``), read and listed through ``Storage``; so may outputs and
the output root.
"""

from __future__ import annotations

import csv
import glob
import io
import json
from collections.abc import Sequence
from pathlib import Path

from fusion_ray.errors import InputError
from fusion_ray.fsutil import check_input_file, resolve_path
from fusion_ray.jobs.plan import Input, JobItem, Output, resolve_output
from fusion_ray.storage import Location, Storage

MANIFEST_COLUMNS = ("source", "target", "output")
"""Required columns; ``options`` (a JSON object of engine overrides) is optional.
``source`` may list several images separated by ``;``."""
OPTIONS_COLUMN = "options"
"""The optional column of an item's engine overrides, a JSON object: FaceFusion's option names,
one key per row of :data:`fusion_ray.options_table.OPTIONS` (``{"face_mask_types": ["box", "area"]}``),
or EngineConfig's own nesting (``{"masks": {"types": ["box", "area"]}}``)."""


def _item(row: dict[str, object], where: str, base: Path | Location, output_root: Output) -> JobItem:
    missing = [c for c in MANIFEST_COLUMNS if not str(row.get(c) or "").strip()]
    if missing:
        raise InputError(f"{where}: missing value(s) for {missing}")
    sources = tuple(_resolve(p.strip(), base) for p in str(row["source"]).split(";") if p.strip())
    options = str(row.get(OPTIONS_COLUMN) or "").strip() or "{}"
    try:
        parsed = json.loads(options)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: options are not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise InputError(f"{where}: options must be a JSON object")
    return JobItem(sources, _resolve(str(row["target"]).strip(), base),
                   _output(str(row["output"]).strip(), output_root), json.dumps(parsed, sort_keys=True))


def _output(text: str, output_root: Output) -> Output:
    """An output URI as a Location, an absolute path as it is, else under ``output_root``."""
    if "://" in text:
        location = Location.parse(text)
        return location.path if location.is_local else location
    if isinstance(output_root, Location):
        return Path(text).expanduser() if text.startswith(("/", "~")) else output_root / text
    output = Path(text)
    return output if output.is_absolute() else output_root / output


def _resolve(path: str, base: Path | Location) -> Input:
    """A URI as a Location (``file://`` as a local path), else a path; a relative one under
    ``base`` (the manifest's folder, local or in a bucket)."""
    if "://" in path:
        location = Location.parse(path)
        return location.path if location.is_local else location
    if isinstance(base, Location):
        return Path(path).expanduser() if path.startswith(("/", "~")) else base / path
    p = Path(path).expanduser()
    return p if p.is_absolute() else base / p


def _remote_rows(location: Location, storage: Storage) -> list[dict[str, object]]:
    """The rows of a manifest in a bucket (read whole: a manifest is small)."""
    data = storage.read_bytes(location)
    if location.suffix.lower() == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return list(pq.read_table(pa.BufferReader(data)).to_pylist())
        except Exception as exc:
            raise InputError(f"cannot read manifest {location}: {exc}") from exc
    if location.suffix.lower() != ".csv":
        raise InputError(f"manifest {location}: expected a .csv or .parquet file")
    try:
        reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline=""))
        missing = [c for c in MANIFEST_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"manifest {location} lacks column(s) {missing}; has {reader.fieldnames}")
        return [dict(row) for row in reader]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read manifest {location}: {exc}") from exc


def read_manifest(path: Path | str | Location, output_root: Output, storage: Storage | None = None
                  ) -> list[JobItem]:
    """Items of a ``.csv`` or ``.parquet`` manifest (a local file or an object in a bucket).
    Relative sources and targets are relative to the manifest's folder; relative outputs to
    ``output_root``."""
    location = Location.parse(path) if isinstance(path, str) and "://" in path else path
    if isinstance(location, Location) and not location.is_local:
        rows = _remote_rows(location, storage or Storage())
        if not rows:
            raise InputError(f"manifest {location} has no rows")
        return [_item(row, f"{location} row {n + 1}", location.parent, output_root) for n, row in enumerate(rows)]
    path = location.path if isinstance(location, Location) else Path(location)
    check_input_file(path, "manifest")
    base = path.parent
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:
            raise InputError(f"cannot read manifest {path}: {exc}") from exc
    elif path.suffix.lower() == ".csv":
        try:
            with path.open(newline="", encoding="utf-8-sig") as handle:  # -sig: Excel starts with a BOM
                reader = csv.DictReader(handle)
                missing = [c for c in MANIFEST_COLUMNS if c not in (reader.fieldnames or [])]
                if missing:
                    raise InputError(f"manifest {path} lacks column(s) {missing}; has {reader.fieldnames}")
                rows = list(reader)
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise InputError(f"cannot read manifest {path}: {exc}") from exc
    else:
        raise InputError(f"manifest {path}: expected a .csv or .parquet file")
    if not rows:
        raise InputError(f"manifest {path} has no rows")
    return [_item(dict(row), f"{path} row {n + 1}", base, output_root) for n, row in enumerate(rows)]


def _glob(pattern: str, storage: Storage | None) -> list[Input]:
    """Matches of a local pattern (sorted paths, as today) or of one in a bucket (Locations)."""
    if "://" in pattern:
        found = (storage or Storage()).glob(pattern)
        return [m.path if m.is_local else m for m in found]
    return [Path(p) for p in sorted(glob.glob(pattern, recursive=True))]


def expand_patterns(source_pattern: str, target_pattern: str, output_pattern: str,
                    output_root: Output, storage: Storage | None = None) -> list[JobItem]:
    """Every source match x every target match, like FaceFusion's batch-run.

    ``output_pattern`` placeholders: ``{index}``, ``{source_name}``, ``{target_name}`` (file
    names without extension) and ``{target_extension}`` (without the dot). Relative outputs
    are placed under ``output_root``. Patterns may be URIs (``s3://b/clips/*.mp4``).
    """
    sources = _glob(source_pattern, storage)
    targets = _glob(target_pattern, storage)
    if not sources:
        raise InputError(f"no file matches the source pattern {source_pattern!r}")
    if not targets:
        raise InputError(f"no file matches the target pattern {target_pattern!r}")
    items = []
    for index, (source, target) in enumerate((s, t) for s in sources for t in targets):
        s, t = source, target
        try:
            name = output_pattern.format(index=index, source_name=s.stem, target_name=t.stem,
                                         target_extension=t.suffix.lstrip("."))
        except (KeyError, IndexError, ValueError) as exc:
            raise InputError(f"bad output pattern {output_pattern!r}: unknown placeholder {exc}") from exc
        items.append(JobItem((_resolved(s),), _resolved(t), _output(name, output_root)))
    return items


def _resolved(found: Input) -> Input:
    """A match resolved through its links; a link loop kept as it is (planning fails its item)."""
    if not isinstance(found, Path):
        return found
    try:
        return resolve_path(found)
    except InputError:
        return found.absolute()


def check_unique_outputs(items: Sequence[JobItem]) -> None:
    """InputError when two items would write the same output."""
    seen: dict[Output, Input] = {}
    for item in items:
        key = resolve_output(item.output)
        if key in seen:
            raise InputError(f"two items write {key} (targets {seen[key]} and {item.target}); "
                             "use {source_name}/{index} in the output pattern")
        seen[key] = item.target
