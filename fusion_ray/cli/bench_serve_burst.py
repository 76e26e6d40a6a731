"""``fusion-ray bench serve-burst``: bursts, and SIGTERM during a burst, against ``fusion-ray serve``."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "serve-burst", help="bursts and SIGTERM during a burst against fusion-ray serve (loopback, bounded)",
        description="Start fusion-ray serve on a loopback port; send --bursts bursts of --concurrency concurrent "
                    "/v1/swap requests from --clients loopback addresses while /metrics is polled, recording "
                    "every answer and the service's memory after each burst; then --sigterm-runs times start it "
                    "again and send SIGTERM during a burst, and once after hostile live streams. Prints whether "
                    "every error was JSON, /metrics answered, memory, 500s and how long each stop took.")
    parser.add_argument("--target", type=Path, required=True, help="target image of every request")
    parser.add_argument("--source", type=Path, required=True, help="source face image (registered once)")
    parser.add_argument("--models-dir", type=Path, required=True, help="the service's model directory")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                        help="use this file for model NAME (repeatable)")
    parser.add_argument("--bursts", type=int, default=7, help="bursts (default 7)")
    parser.add_argument("--concurrency", type=int, default=200, help="requests per burst, all at once (default 200)")
    parser.add_argument("--clients", type=int, default=25, help="loopback addresses they come from (default 25)")
    parser.add_argument("--sigterm-runs", type=int, default=3, help="stops during a burst (default 3)")
    parser.add_argument("--port", type=int, default=8141, help="loopback port of the service (default 8141)")
    parser.add_argument("--log", type=Path, default=Path("serve_burst.log"),
                        help="append the service's stderr here (default serve_burst.log)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fusion_ray.bench.serve_burst import (
        BurstPlan,
        burst_table,
        run_bursts,
        run_stop,
        run_stop_after_hostile_streams,
        stop_table,
    )

    models = ("--models-dir", str(args.models_dir), *(a for m in args.model for a in ("--model", m)))
    plan = BurstPlan(target=args.target, source=args.source, models=models, port=args.port, bursts=args.bursts,
                     concurrency=args.concurrency, clients=args.clients, sigterm_runs=args.sigterm_runs,
                     log=args.log)
    if plan.bursts:
        print(burst_table(asyncio.run(run_bursts(plan))), flush=True)
    if plan.sigterm_runs:
        print(stop_table([asyncio.run(run_stop(plan)) for _ in range(plan.sigterm_runs)]), flush=True)
        print("after hostile live streams, nothing in flight:")
        print(stop_table([asyncio.run(run_stop_after_hostile_streams(plan))]), flush=True)
    return 0
