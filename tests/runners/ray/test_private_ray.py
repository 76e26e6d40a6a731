"""The one private Ray attribute fusion_ray uses, held to its behaviour so a Ray upgrade that breaks
it fails here: ``Dataset._logical_plan`` in :func:`fusion_ray.runners.ray.stream.one_row_blocks`,
which gives the repartition's tasks a fractional CPU (Ray Data has no public argument for it)."""

import re
from pathlib import Path

import pytest

from fusion_ray.runners.ray.stream import one_row_blocks

PACKAGE = Path(__file__).resolve().parents[3] / "fusion_ray"
PRIVATE = re.compile(r"\._logical_plan\b|ray\.(?:data\.)?_internal\b|ray\._private\b|ray\._raylet\b")


def test_private_ray_attributes_are_used_in_one_place_only():
    uses = [f"{path.relative_to(PACKAGE)}:{n}" for path in sorted(PACKAGE.rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1) if PRIVATE.search(line)]
    assert len(uses) == 1 and uses[0].startswith("runners/ray/stream.py:"), uses


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_one_row_blocks_asks_for_its_fractional_cpu_and_splits_into_one_row_blocks():
    import ray

    ds = one_row_blocks(ray.data.from_items([{"n": n} for n in range(4)], override_num_blocks=1), 0.25)
    operator = ds._logical_plan.dag
    assert type(operator).__name__ == "StreamingRepartition", type(operator)  # the operator it sets
    assert operator.ray_remote_args["num_cpus"] == 0.25
    bundles = list(ds.iter_internal_ref_bundles())
    assert sum(b.num_rows() for b in bundles) == 4 and all(b.num_rows() == 1 for b in bundles)
