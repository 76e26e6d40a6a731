"""Job items from a manifest (CSV or Parquet) or from FaceFusion-style batch patterns."""

from __future__ import annotations

import csv
import glob
import json
from collections.abc import Sequence
from pathlib import Path

from fusion_ray.errors import InputError
from fusion_ray.pipeline.plan import JobItem

MANIFEST_COLUMNS = ("source", "target", "output")
"""Required columns; ``options`` (a JSON object of engine overrides) is optional.
``source`` may list several images separated by ``;``."""


def _item(row: dict[str, object], where: str, base: Path, output_root: Path) -> JobItem:
    missing = [c for c in MANIFEST_COLUMNS if not str(row.get(c) or "").strip()]
    if missing:
        raise InputError(f"{where}: missing value(s) for {missing}")
    sources = tuple(_resolve(p.strip(), base) for p in str(row["source"]).split(";") if p.strip())
    options = str(row.get("options") or "").strip() or "{}"
    try:
        parsed = json.loads(options)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: options are not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise InputError(f"{where}: options must be a JSON object")
    output = Path(str(row["output"]).strip())
    return JobItem(sources, _resolve(str(row["target"]).strip(), base),
                   output if output.is_absolute() else output_root / output, json.dumps(parsed, sort_keys=True))


def _resolve(path: str, base: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else base / p


def read_manifest(path: Path, output_root: Path) -> list[JobItem]:
    """Items of a ``.csv`` or ``.parquet`` manifest. Relative sources and targets are relative to
    the manifest's folder; relative outputs to ``output_root``."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"file not found: {path}")
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


def expand_patterns(source_pattern: str, target_pattern: str, output_pattern: str,
                    output_root: Path) -> list[JobItem]:
    """Every source match x every target match, like FaceFusion's batch-run.

    ``output_pattern`` placeholders: ``{index}``, ``{source_name}``, ``{target_name}`` (file
    names without extension) and ``{target_extension}`` (without the dot). Relative outputs
    are placed under ``output_root``.
    """
    sources = sorted(glob.glob(source_pattern, recursive=True))
    targets = sorted(glob.glob(target_pattern, recursive=True))
    if not sources:
        raise InputError(f"no file matches the source pattern {source_pattern!r}")
    if not targets:
        raise InputError(f"no file matches the target pattern {target_pattern!r}")
    items = []
    for index, (source, target) in enumerate((s, t) for s in sources for t in targets):
        s, t = Path(source), Path(target)
        try:
            name = output_pattern.format(index=index, source_name=s.stem, target_name=t.stem,
                                         target_extension=t.suffix.lstrip("."))
        except (KeyError, IndexError, ValueError) as exc:
            raise InputError(f"bad output pattern {output_pattern!r}: unknown placeholder {exc}") from exc
        output = Path(name)
        items.append(JobItem((s.resolve(),), t.resolve(), output if output.is_absolute() else output_root / output))
    return items


def check_unique_outputs(items: Sequence[JobItem]) -> None:
    """InputError when two items would write the same output."""
    seen: dict[Path, Path] = {}
    for item in items:
        key = item.output.expanduser().resolve()
        if key in seen:
            raise InputError(f"two items write {key} (targets {seen[key]} and {item.target}); "
                             "use {source_name}/{index} in the output pattern")
        seen[key] = item.target
