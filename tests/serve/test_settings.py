"""The service's settings without Ray: defaults, partial mappings, refusals, the token, the
shipped configs/serve.yaml and the placement."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusion_ray.errors import ConfigError
from fusion_ray.serve.settings import (
    ServeSettings,
    find_application,
    parse_settings,
    read_serve_config,
)

REPO = Path(__file__).resolve().parents[2]


def test_default_settings_are_valid_and_batches_can_fill():
    settings = ServeSettings()
    assert settings.swapper_max_ongoing() >= settings.batching.swap.max_batch_size
    assert settings.enhancer_max_ongoing() >= settings.batching.enhance.max_batch_size
    assert settings.ingress_max_ongoing() > settings.limits.max_inflight
    off = settings.with_batch_size(1)
    assert off.batching.swap.max_batch_size == 1 and off.batching.enhance.max_batch_size == 1
    assert off.batching.swap.batch_wait_timeout_s == settings.batching.swap.batch_wait_timeout_s


def test_a_partial_deployment_mapping_keeps_that_deployments_defaults():
    defaults = ServeSettings().deployments
    deps = parse_settings({"deployments": {"state": {"num_cpus": 0.1}, "ingress": {"num_replicas": 2},
                                           "detector": {"max_ongoing_requests": None}}}).deployments
    assert deps.state == defaults.state.model_copy(update={"num_cpus": 0.1})
    assert deps.state.max_queued_requests == -1 and deps.state.max_ongoing_requests == 256
    assert deps.ingress == defaults.ingress.model_copy(update={"num_replicas": 2})
    assert deps.detector.max_ongoing_requests is None and deps.detector.num_cpus == defaults.detector.num_cpus
    assert deps.swapper == defaults.swapper


@pytest.mark.parametrize("args,match", [
    ({"deployments": {"ingress": {"max_ongoing_requests": 4}}, "limits": {"max_inflight": 4}}, "must exceed"),
    ({"deployments": {"swapper": {"max_ongoing_requests": 2}}}, "batches could never fill"),
    ({"engine": {"selection": {"mode": "reference", "reference_path": "/x.jpg"}}}, "reference"),
    ({"deployments": {"state": {"num_replicas": 2}}}, "exactly one replica"),
    ({"limits": {"max_body_byte": 1}}, "max_body_byte"),
])
def test_bad_settings_are_config_errors(args, match):
    with pytest.raises(ConfigError, match=match):
        parse_settings(args)


def test_token_from_config_or_environment():
    from fusion_ray.serve.settings import AuthSettings

    assert AuthSettings(token="t").resolve_token({"FUSION_RAY_API_TOKEN": "e"}) == "t"
    assert AuthSettings().resolve_token({"FUSION_RAY_API_TOKEN": "e"}) == "e"
    assert AuthSettings().resolve_token({}) is None
    assert AuthSettings(token_env=None).resolve_token({"FUSION_RAY_API_TOKEN": "e"}) is None


def test_serve_yaml_is_a_valid_serve_config_and_builds():
    from ray.serve import Application
    from ray.serve.schema import ServeDeploySchema

    from fusion_ray.serve.app import build_app

    path = REPO / "configs" / "serve.yaml"
    config = read_serve_config(path)
    ServeDeploySchema.model_validate(config)  # what `serve run` / RayService accept
    app = find_application(config)
    settings = parse_settings(app["args"])
    assert settings.limits.max_body_bytes == 20_000_000
    assert settings.batching.swap.batch_wait_timeout_s == pytest.approx(0.015)
    assert settings.deployments == ServeSettings().deployments  # the file spells out the defaults
    assert isinstance(build_app(app["args"]), Application)
    with pytest.raises(ConfigError):
        find_application({"applications": [{"import_path": "other:app"}]})


def test_upload_settings_fit_the_ingress_concurrency():
    with pytest.raises(ConfigError, match="max_uploads_per_client"):
        parse_settings({"limits": {"max_uploads": 2, "max_uploads_per_client": 3}})
    with pytest.raises(ConfigError, match="max_inflight \\+ limits.max_uploads"):
        parse_settings({"deployments": {"ingress": {"max_ongoing_requests": 40}},
                        "limits": {"max_inflight": 16, "max_uploads": 24}})
    settings = parse_settings({"deployments": {"ingress": {"max_ongoing_requests": None}}})
    assert settings.ingress_max_ongoing() > settings.limits.max_inflight + settings.limits.max_uploads


def test_auto_placement_is_fused_unless_a_node_has_more_than_one_gpu():
    from fusion_ray.serve.settings import resolve_placement

    assert resolve_placement("auto", []) == "fused"  # no cluster yet, or CPU nodes only
    assert resolve_placement("auto", [0.0, 1.0]) == "fused"  # one GPU per node
    assert resolve_placement("auto", [0.0, 2.0]) == "split"
    assert resolve_placement("fused", [8.0]) == "fused" and resolve_placement("split", []) == "split"
    assert ServeSettings().placement == "auto"
    with pytest.raises(ConfigError):
        parse_settings({"placement": "scattered"})
