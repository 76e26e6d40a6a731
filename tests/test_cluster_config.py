"""cluster.yaml is checked with Ray's own cluster-launcher validation."""

import copy

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def cluster():
    return yaml.safe_load((REPO_ROOT / "cluster.yaml").read_text())


def test_cluster_yaml_passes_ray_validation(cluster):
    validate_config(prepare_config(copy.deepcopy(cluster)))


def test_node_resources_are_integers_and_workers_have_gpus(cluster):
    for name, node in cluster["available_node_types"].items():
        for key, value in node["resources"].items():
            assert isinstance(value, int), f"{name}.{key} must be an integer, got {value!r}"
    head = cluster["head_node_type"]
    assert "GPU" not in cluster["available_node_types"][head]["resources"]
    gpu_workers = [n for k, n in cluster["available_node_types"].items() if k != head and n["resources"].get("GPU")]
    assert gpu_workers and all(n.get("min_workers", 0) == 0 for n in gpu_workers)  # autoscaling from zero


def test_setup_installs_this_project(cluster):
    commands = " ".join(cluster["setup_commands"])
    assert "pip install" in commands and "~/fusion_ray" in commands
    assert cluster["file_mounts"]["~/fusion_ray"] == "."


def test_ray_rejects_a_broken_copy(cluster):
    broken = copy.deepcopy(cluster)
    broken["available_node_types"]["worker.gpu"]["bogus_key"] = 1
    with pytest.raises(jsonschema.ValidationError, match="bogus_key"):
        validate_config(prepare_config(broken))
