"""Fixtures of the serve tests: the in-process reference engine, the shared photos as bytes and
their identities (a module that needs another engine defines its own ``engine``)."""

import pytest

from fusion_ray.config import EngineConfig, RuntimeConfig
from fusion_ray.imageio import decode_image
from fusion_ray.runners.inline import Engine


@pytest.fixture(scope="module")
def engine(models_config):
    """The in-process reference (no enhancement; variants enable it)."""
    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]))
    return Engine.load(cfg, components=["detector", "embedder", "swapper", "enhancer"], cpu_budget=1)


@pytest.fixture(scope="module")
def photos(images_dir):
    return {name: (images_dir / f"{name}.jpg").read_bytes() for name in ("obama", "biden", "obama_and_biden")}


@pytest.fixture(scope="module")
def identities(engine, photos):
    return {name: engine.prepare_source([decode_image(photos[name]).frame]) for name in ("obama", "biden")}

