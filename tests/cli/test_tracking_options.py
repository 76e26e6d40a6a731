"""``--no-tracking`` and ``tracking: on|off`` map to EngineConfig.tracking."""

import argparse

import pytest

from fusion_ray.cli.common import add_engine_arguments, engine_config_from_args


@pytest.mark.parametrize("argv,yaml,enabled", [([], None, True), (["--no-tracking"], None, False),
                                               ([], "tracking: off", False), ([], "tracking: on", True),
                                               (["--no-tracking"], "tracking: {enabled: true, max_gap: 5}", False)])
def test_tracking_options(tmp_path, argv, yaml, enabled):
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    if yaml is not None:
        (tmp_path / "e.yaml").write_text("engine:\n  " + yaml + "\n")
        argv = [*argv, "--config", str(tmp_path / "e.yaml")]
    cfg = engine_config_from_args(parser.parse_args(argv))
    assert cfg.tracking.enabled is enabled
    if yaml and "max_gap" in yaml:
        assert cfg.tracking.max_gap == 5
