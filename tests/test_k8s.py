"""k8s/rayjob.yaml and k8s/rayservice.yaml (KubeRay) against fusion_ray's and Ray's own schemas.

No Kubernetes here: the manifests are parsed, their embedded configs are validated by the code
that reads them on the cluster (fusion_ray's CLI parser, pipeline and Serve settings; Ray
Serve's deploy schema), and the environment variables they set are the ones the code reads.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from pydantic import ValidationError

from fusion_ray.errors import ConfigError
from fusion_ray.models.store import ENV_MODELS_DIR, resolve_models_dir
from fusion_ray.serve.settings import (
    APP_IMPORT_PATH,
    DEFAULT_TOKEN_ENV,
    ServeSettings,
    find_application,
    parse_settings,
)
from tests.conftest import REPO_ROOT

SERVE_YAML = REPO_ROOT / "configs" / "serve.yaml"
GPU = "nvidia.com/gpu"

# The only lines where the RayService's serveConfigV2 differs from configs/serve.yaml (the comment
# above serveConfigV2 says why): the proxies listen on the pod IP, the GPU deployments ask for GPUs,
# the placement is split (per-model GPU pools that autoscale from zero).
K8S_CHANGES = (
    ("  host: 127.0.0.1\n", "  host: 0.0.0.0\n"),
    ("swapper:  {num_replicas: 1, num_cpus: 0.25, num_gpus: 0,",
     "swapper:  {num_replicas: 1, num_cpus: 0.25, num_gpus: 0.5,"),
    ("enhancer: {num_replicas: 1, num_cpus: 0.25, num_gpus: 0,",
     "enhancer: {num_replicas: 1, num_cpus: 0.25, num_gpus: 0.5,"),
    ("      placement: auto\n", "      placement: split\n"),
)
# The standard AWS variables object storage is configured from; AWS_DEFAULT_REGION
# repeats AWS_REGION for SDKs that read only that name.
AWS_VARIABLES = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"}
AWS_OPTIONAL = {"AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"}


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((REPO_ROOT / "k8s" / name).read_text())
    assert isinstance(data, dict), f"k8s/{name} is not one YAML mapping"
    return data


@pytest.fixture(scope="module")
def rayjob() -> dict[str, Any]:
    return _load("rayjob.yaml")


@pytest.fixture(scope="module")
def rayservice() -> dict[str, Any]:
    return _load("rayservice.yaml")


@pytest.fixture(scope="module", params=["rayjob.yaml", "rayservice.yaml"])
def manifest(request: pytest.FixtureRequest) -> dict[str, Any]:
    return _load(request.param)


def _cluster(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    return spec["rayClusterSpec"] if doc["kind"] == "RayJob" else spec["rayClusterConfig"]


def _groups(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The head group, then the worker groups."""
    cluster = _cluster(doc)
    return [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]


def _container(group: dict[str, Any]) -> dict[str, Any]:
    containers = group["template"]["spec"]["containers"]
    assert len(containers) == 1, "one Ray container per pod"
    return containers[0]


def _limits(group: dict[str, Any]) -> dict[str, Any]:
    return _container(group)["resources"]["limits"]


def _gpu_groups(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for g in _cluster(doc)["workerGroupSpecs"] if _limits(g).get(GPU)]


def _env(group: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in _container(group).get("env", [])}


def _serve_config(rayservice: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(rayservice["spec"]["serveConfigV2"])  # type: ignore[no-any-return]


def _secret_ref(entry: dict[str, Any]) -> dict[str, Any]:
    assert "value" not in entry, f"{entry['name']} must come from a Secret, not a literal value"
    return entry["valueFrom"]["secretKeyRef"]  # type: ignore[no-any-return]


# ------------------------------------------------------------------ both manifests


def test_kinds_and_api_versions(rayjob, rayservice):
    assert (rayjob["apiVersion"], rayjob["kind"]) == ("ray.io/v1", "RayJob")
    assert (rayservice["apiVersion"], rayservice["kind"]) == ("ray.io/v1", "RayService")
    assert isinstance(rayservice["spec"]["serveConfigV2"], str)  # KubeRay takes the config as a string


def test_ray_version_is_the_one_installed(manifest):
    declared = _cluster(manifest)["rayVersion"].split(".")[:2]
    assert declared == ray.__version__.split(".")[:2]


def test_gpu_workers_autoscale_from_zero(manifest):
    assert _cluster(manifest)["enableInTreeAutoscaling"] is True
    head = _cluster(manifest)["headGroupSpec"]
    assert GPU not in _limits(head) and head["rayStartParams"]["num-gpus"] == "0"  # a CPU head
    gpu_groups = _gpu_groups(manifest)
    assert gpu_groups, "no worker group with an nvidia.com/gpu limit"
    for group in gpu_groups:
        assert group["minReplicas"] == 0 and group["replicas"] == 0 and group["maxReplicas"] >= 1
        resources = _container(group)["resources"]
        assert resources["requests"][GPU] == resources["limits"][GPU]
        assert group["rayStartParams"]["num-gpus"] == str(resources["limits"][GPU])


def test_every_pod_mounts_the_models_read_only(manifest):
    assert ENV_MODELS_DIR == "FUSION_RAY_MODELS"
    for group in _groups(manifest):
        volumes = {v["name"]: v for v in group["template"]["spec"]["volumes"]}
        assert volumes["models"]["persistentVolumeClaim"]["readOnly"] is True
        mount = next(m for m in _container(group)["volumeMounts"] if m["name"] == "models")
        assert mount["readOnly"] is True
        models_dir = _env(group)[ENV_MODELS_DIR]["value"]
        assert models_dir == mount["mountPath"]
        assert resolve_models_dir(env={ENV_MODELS_DIR: models_dir}) == Path(mount["mountPath"])
        # Ray's object store needs a /dev/shm larger than a container's default 64 MB.
        assert volumes["shm"]["emptyDir"]["medium"] == "Memory"


# ------------------------------------------------------------------ RayService


def test_serve_config_v2_is_configs_serve_yaml(rayservice):
    text = SERVE_YAML.read_text()
    expected = text
    for old, new in K8S_CHANGES:
        assert expected.count(old) == 1, f"configs/serve.yaml no longer has exactly one {old.strip()!r}"
        expected = expected.replace(old, new)
    embedded = rayservice["spec"]["serveConfigV2"]
    diff = "".join(difflib.unified_diff(expected.splitlines(True), embedded.splitlines(True),
                                        "configs/serve.yaml with K8S_CHANGES", "serveConfigV2"))
    assert embedded == expected, "k8s/rayservice.yaml is out of sync with configs/serve.yaml:\n" + diff
    # The same document once parsed, but for the four values.
    config, original = yaml.safe_load(embedded), yaml.safe_load(text)
    assert config["http_options"]["host"] == "0.0.0.0"
    config["http_options"]["host"] = original["http_options"]["host"]
    for app in config["applications"]:
        assert app["args"]["placement"] == "split"  # the GPU pools, whatever the cluster has at deploy time
        app["args"]["placement"] = "auto"
        for name in ("swapper", "enhancer"):
            assert app["args"]["deployments"][name]["num_gpus"] == 0.5
            app["args"]["deployments"][name]["num_gpus"] = 0
    assert config == original


def test_serve_config_v2_passes_ray_and_fusion_ray_schemas(rayservice):
    from ray.serve import Application
    from ray.serve.schema import ServeDeploySchema

    from fusion_ray.serve.app import build_app

    config = _serve_config(rayservice)
    ServeDeploySchema.model_validate(config)  # what KubeRay hands to Serve's REST API
    assert find_application(config, "serveConfigV2")["import_path"] == APP_IMPORT_PATH
    for app in config["applications"]:
        module, attribute = app["import_path"].split(":")
        assert getattr(importlib.import_module(module), attribute) is build_app
        settings = parse_settings(app["args"], source="serveConfigV2")
        assert settings.engine.models.models_dir is None  # so $FUSION_RAY_MODELS applies
        assert isinstance(build_app(app["args"]), Application)


def test_broken_copies_are_rejected(rayservice):
    from ray.serve.schema import ServeDeploySchema

    config = _serve_config(rayservice)
    # Ray 2.60's schema ignores unknown keys (a misspelt Ray option passes), but checks values.
    broken = copy.deepcopy(config)
    broken["proxy_location"] = "Everywhere"
    with pytest.raises(ValidationError, match="proxy_location"):
        ServeDeploySchema.model_validate(broken)
    broken = copy.deepcopy(config)
    broken["applications"][0]["import_path"] = "build_app"
    with pytest.raises(ValidationError, match="import_path"):
        ServeDeploySchema.model_validate(broken)
    # fusion_ray's args are strict: an unknown key is an error naming it.
    args = copy.deepcopy(find_application(config)["args"])
    args["limits"]["bogus_key"] = 1
    with pytest.raises(ConfigError, match="bogus_key"):
        parse_settings(args)


def test_gpu_deployments_ask_for_and_fit_a_gpu_worker(rayservice):
    settings = parse_settings(find_application(_serve_config(rayservice))["args"])
    deps = settings.deployments
    (group,) = _gpu_groups(rayservice)
    gpus, cpus = float(group["rayStartParams"]["num-gpus"]), float(_limits(group)["cpu"])
    for dep in (deps.swapper, deps.enhancer):
        assert 0 < dep.num_gpus <= gpus and dep.num_cpus <= cpus  # asks for a GPU pod and fits one
    assert deps.swapper.num_gpus + deps.enhancer.num_gpus <= gpus  # both share one GPU pod
    assert deps.ingress.num_gpus == deps.detector.num_gpus == deps.state.num_gpus == 0
    head_cpus = float(_limits(_cluster(rayservice)["headGroupSpec"])["cpu"])
    assert deps.ingress.num_cpus + deps.detector.num_cpus + deps.state.num_cpus <= head_cpus


def test_api_token_comes_from_a_secret(rayservice):
    settings = parse_settings(find_application(_serve_config(rayservice))["args"])
    assert settings.auth.token_env == DEFAULT_TOKEN_ENV == ServeSettings().auth.token_env
    assert settings.auth.token is None  # never in the config itself
    for group in _groups(rayservice):  # the ingress replica may run on any pod
        ref = _secret_ref(_env(group)[settings.auth.token_env])
        assert ref["name"] and ref["key"] and not ref.get("optional", False)


# ------------------------------------------------------------------ RayJob


def test_rayjob_entrypoint_is_a_fusion_ray_job_command(rayjob):
    from fusion_ray.cli import build_parser
    from fusion_ray.jobs.config import load_job_config

    argv = shlex.split(rayjob["spec"]["entrypoint"])
    assert argv[0] == "fusion-ray"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "job" and args.address == "auto"
    for flag in ("--manifest", "--output-root"):
        assert argv[argv.index(flag) + 1].startswith("s3://"), f"{flag} is not an object-storage URI"
    # The pipeline config is a path inside the image, relative to the containers' workingDir,
    # where the image holds this repository.
    assert not args.pipeline_config.is_absolute()
    assert {_container(g)["workingDir"] for g in _groups(rayjob)} == {"/home/ray/fusion_ray"}
    job = load_job_config(REPO_ROOT / args.pipeline_config)
    assert job.engine.models.models_dir is None  # so $FUSION_RAY_MODELS applies
    assert job.pipeline.gpus == "always"  # GPU pools ask for GPUs while the GPU group is at zero
    (group,) = _gpu_groups(rayjob)
    gpus, cpus = float(group["rayStartParams"]["num-gpus"]), float(_limits(group)["cpu"])
    for stage in (job.pipeline.swap, job.pipeline.enhance):
        assert 0 < stage.num_gpus <= gpus and stage.num_cpus <= cpus


def test_rayjob_pods_get_the_aws_credentials_from_a_secret(rayjob):
    source = "\n".join(p.read_text() for p in (REPO_ROOT / "fusion_ray").rglob("*.py"))
    read_by_code = set(re.findall(r"\bAWS_[A-Z_]+\b", source))
    for group in _groups(rayjob):  # reads, encodes and joins run on any node
        env = _env(group)
        names = {name for name in env if name.startswith("AWS_")}
        assert names == AWS_VARIABLES
        assert read_by_code <= names, f"fusion_ray reads {sorted(read_by_code - names)}, not set here"
        secrets = set()
        for name in names:
            ref = _secret_ref(env[name])
            assert ref.get("optional", False) == (name in AWS_OPTIONAL), name
            secrets.add(ref["name"])
        assert len(secrets) == 1


# ------------------------------------------------------------------ the model volume


def test_models_job_fills_the_volume_the_ray_pods_mount(rayjob, rayservice):
    from fusion_ray.cli import build_parser

    docs = {d["kind"]: d for d in yaml.safe_load_all((REPO_ROOT / "k8s" / "models.yaml").read_text())}
    claim = docs["PersistentVolumeClaim"]
    assert "ReadWriteMany" in claim["spec"]["accessModes"]  # one writer, then every node reads
    for doc in (rayjob, rayservice):
        for group in _groups(doc):
            volumes = {v["name"]: v for v in group["template"]["spec"]["volumes"]}
            assert volumes["models"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    pod = docs["Job"]["spec"]["template"]["spec"]
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
    (container,) = pod["containers"]
    mount = container["volumeMounts"][0]
    assert not mount.get("readOnly", False)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert resolve_models_dir(env=env) == Path(mount["mountPath"])
    command = container["command"]
    assert command[0] == "fusion-ray"
    args = build_parser().parse_args(command[1:])
    assert (args.command, args.models_command) == ("models", "download")
    assert args.accept_licences and args.names == []  # every model, without a terminal
