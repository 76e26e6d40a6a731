"""Run one job twice, on a single-node Ray instance and on a real two-node Ray cluster, and say
what ran where (run in a subprocess by tests/runners/ray/test_multinode.py: one process can be
connected to one Ray cluster only, and the test session already has one).

``python tests/runners/ray/multinode_job.py SPEC.json`` reads ``{"config": JobConfig JSON,
"items": [[sources, target, output name]], "single_root": dir, "cluster_root": dir,
"summary": path}``. It runs the items into ``single_root`` on ``ray.init(num_cpus=2)``, shuts
Ray down, then starts a ``ray.cluster_utils.Cluster`` (a head and a worker raylet with one CPU
each; the worker also has the custom resource ``worker_node``), runs the same items into
``cluster_root`` and writes the summary: each run's item statuses and wall time, the two node
ids, and every actor and actor task the cluster recorded (class, node, state) from Ray's state
API (served by the head's dashboard).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster
from ray.util.state import list_actors, list_tasks

from fusion_ray.jobs.config import JobConfig
from fusion_ray.runners.job import JobItem, run_job

WORKER_RESOURCE = "worker_node"


def _run(items: list[JobItem], cfg: JobConfig, root: Path) -> dict[str, Any]:
    start = time.perf_counter()
    report = run_job(items, cfg, output_root=root)
    return {"wall_s": time.perf_counter() - start,
            "items": [{"status": i.status, "error": i.error, "frames": i.frames,
                       "faces_swapped": i.faces_swapped} for i in report.items]}


def _placement() -> dict[str, Any]:
    """Which node each actor (and each actor task) ran on, as the cluster recorded it."""
    actors = [{"class_name": a.class_name, "node_id": a.node_id, "state": a.state, "actor_id": a.actor_id}
              for a in list_actors(detail=True, limit=10_000, raise_on_missing_output=False)]
    tasks = [{"name": t.name, "type": t.type, "node_id": t.node_id, "actor_id": t.actor_id, "state": t.state}
             for t in list_tasks(detail=True, limit=10_000, raise_on_missing_output=False)]
    return {"actors": actors, "tasks": tasks}


def _on_cluster(items: list[JobItem], cfg: JobConfig, root: Path) -> dict[str, Any]:
    start = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": True})
    try:
        cluster.add_node(num_cpus=1, resources={WORKER_RESOURCE: 1})
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        cluster.wait_for_nodes()
        nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
        started = time.perf_counter() - start
        run = _run(items, cfg, root)
        time.sleep(2.0)  # task events reach the state API a little after the tasks end
        return {**run, "start_s": started, "head": ray.get_runtime_context().get_node_id(),
                "worker": next(n for n, r in nodes.items() if WORKER_RESOURCE in r),
                "nodes": nodes, **_placement()}
    finally:
        ray.shutdown()
        cluster.shutdown()


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    cfg = JobConfig.model_validate_json(spec["config"])

    def items(root: str) -> list[JobItem]:
        return [JobItem(tuple(Path(s) for s in sources), Path(target), Path(root) / name)
                for sources, target, name in spec["items"]]

    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        started = time.perf_counter() - start
        single = {**_run(items(spec["single_root"]), cfg, Path(spec["single_root"])), "start_s": started}
    finally:
        ray.shutdown()
    summary = {"single": single, "cluster": _on_cluster(items(spec["cluster_root"]), cfg, Path(spec["cluster_root"]))}
    Path(spec["summary"]).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
