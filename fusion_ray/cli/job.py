"""``fusion-ray job``: many images and videos in one Ray Data job (manifest or batch patterns)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fusion_ray.cli.common import add_engine_arguments, engine_config_from_args
from fusion_ray.cli.video import (
    ProgressPrinter,
    add_pipeline_arguments,
    job_config,
    print_summary,
    start_runner,
)
from fusion_ray.errors import InputError

if TYPE_CHECKING:
    from fusion_ray.storage import Location, Storage

REPORT_NAME = "fusion_ray_report.json"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "job", help="swap faces in many images and videos as one job (in this process, or a Ray Data job)",
        description="Items come from --manifest (CSV/Parquet: source, target, output[, options]) or from "
                    "--source-pattern/--target-pattern/--output-pattern (every source x every target). "
                    "Finished outputs are skipped and a video's finished segments are kept, so re-running "
                    "a job (after a crash or kill -9 too) redoes only what is missing.")
    parser.add_argument("--manifest", help="CSV or Parquet manifest (a path or an s3:// / gs:// URI)")
    parser.add_argument("--source-pattern", help="glob of source images, e.g. 'faces/*.jpg' or 's3://b/faces/*.jpg'")
    parser.add_argument("--target-pattern", help="glob of targets, e.g. 'clips/*.mp4' or 's3://b/clips/*.mp4'")
    parser.add_argument("--output-pattern", default="{source_name}-{target_name}.{target_extension}",
                        help="output names: {index} {source_name} {target_name} {target_extension}")
    parser.add_argument("--output-root", default=".",
                        help="every output must be inside this folder or bucket prefix, e.g. s3://b/out "
                             "(default: the current folder)")
    parser.add_argument("--force", action="store_true", help="redo items whose output exists")
    parser.add_argument("--clean-parts", action="store_true",
                        help="remove the parts folders (finished segments of unfinished videos, kept so that "
                             "a re-run resumes them) under --output-root, abort the unfinished uploads a store "
                             "that stalled left there, then exit")
    add_engine_arguments(parser)
    add_pipeline_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fusion_ray.jobs.manifest import check_unique_outputs, expand_patterns, read_manifest
    from fusion_ray.runners.job import plan_job, run_plan
    from fusion_ray.storage import Location, Storage, StorageConfig

    started = time.monotonic()
    storage = Storage(StorageConfig.from_env(os.environ))  # buckets reached with the standard AWS variables
    root = _output_root(args.output_root)
    # before any work: a read-only root would fail every item; a missing bucket or refused
    # credentials are one line
    storage.check_writable(root)
    if args.clean_parts:
        return _clean_parts(root, storage)
    if args.manifest and (args.source_pattern or args.target_pattern):
        raise InputError("give either --manifest or the patterns, not both")
    if args.manifest:
        items = read_manifest(args.manifest, root, storage)
    elif args.source_pattern and args.target_pattern:
        items = expand_patterns(args.source_pattern, args.target_pattern, args.output_pattern, root, storage)
    else:
        raise InputError("give --manifest, or --source-pattern and --target-pattern")
    check_unique_outputs(items)
    cfg = job_config(args, engine_config_from_args(args))
    # The report (and its rows file, streamed while the job runs) goes beside the outputs; for a
    # root in a bucket it is written locally, then published there.
    spool: Path | None = None
    if args.report:
        report_path: Path = args.report
    elif isinstance(root, Path):
        report_path = root / REPORT_NAME
    else:
        spool = Path(tempfile.mkdtemp(prefix="fusion_ray_report."))
        report_path = spool / REPORT_NAME
    print(f"{len(items)} item(s); outputs under {root if isinstance(root, Location) else root.resolve()}",
          file=sys.stderr)
    try:
        planning = time.perf_counter()
        plan = plan_job(items, cfg, output_root=root, force=args.force, storage=storage)  # before any runner: bad items fail at once
        runner = start_runner(args, plan) if plan.runs else "local"  # nothing runs: no runner starts
        report = run_plan(plan, progress=ProgressPrinter(), report_path=report_path, started=planning, runner=runner)
        print_summary(report, time.monotonic() - started, None if spool else report_path)
        published = True
        if spool is not None and isinstance(root, Location):  # the report goes with the outputs
            published = _publish_report(report_path, root / REPORT_NAME, storage)
            if not published:
                spool = None  # kept where it was written
    finally:
        if spool is not None:
            shutil.rmtree(spool, ignore_errors=True)
    return 0 if report.counts().get("failed", 0) == 0 and published else 1


def _clean_parts(root: Path | Location, storage: Storage) -> int:
    from fusion_ray.jobs.parts import find_parts_folders

    folders = find_parts_folders(storage, root)
    for folder in folders:
        storage.remove_tree(folder)
        print(f"removed {folder}", file=sys.stderr)
    print(f"{len(folders)} parts folder(s) removed under {root}", file=sys.stderr)
    aborted = storage.abort_uploads(root)  # what a store that stalled mid-upload left (0 outside S3)
    if aborted:
        print(f"{aborted} unfinished upload(s) aborted under {root}", file=sys.stderr)
    return 0


def _output_root(text: str) -> Path | Location:
    """The output root: a local folder or a prefix in a bucket (``type=Path`` would turn
    ``s3://b/x`` into ``s3:/b/x``); LocationError (an InputError) for a URI that is none."""
    if "://" not in text:
        return Path(text)
    from fusion_ray.storage import Location

    location = Location.parse(text)
    return location.path if location.is_local else location


def _publish_report(report_path: Path, location: Location, storage: Storage) -> bool:
    """Publish the report and its rows file beside the outputs in their bucket (each whole or
    not at all). When the store cannot take them (it stalls, it is gone), they stay where they
    were written, and the message says where: False."""
    from fusion_ray.runners.job import rows_path
    from fusion_ray.storage import StorageError

    rows = rows_path(report_path)
    try:
        storage.publish(report_path, location)
        storage.publish(rows, location.with_name(rows.name))
    except StorageError as exc:
        print(f"error: the report could not be published ({exc}); it is kept at {report_path} "
              f"(rows: {rows})", file=sys.stderr)
        return False
    print(f"report: {location}", file=sys.stderr)
    return True
