"""ModelSet and the swapper / enhancer rows: converters loaded and labelled, the
enhancer weight passed down, and one-line errors for missing files and unknown names. On
STAND-INs (labelled, not real models)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, EnhanceConfig, ModelsConfig, RuntimeConfig
from fusion_ray.core.modelset import ModelSet, inspect_models
from fusion_ray.core.steps import required_components
from fusion_ray.errors import ConfigError, ModelMissingError
from fusion_ray.models.spec_models import SpecSwapper
from tests.models.session_helpers import recording

CPU = RuntimeConfig(providers=["cpu"])


def _cfg(models_config: ModelsConfig, swapper: str = "inswapper_128", enhancer: str | None = None,
         weight: float = 0.5) -> EngineConfig:
    models = models_config.model_copy(update={"swapper": swapper, **({"enhancer": enhancer} if enhancer else {})})
    return EngineConfig(models=models, runtime=CPU, enhance=EnhanceConfig(enabled=enhancer is not None, weight=weight))


def test_a_row_with_a_converter_loads_both_and_labels_both(rows_models_config) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg(rows_models_config, "simswap_256")
    models = ModelSet.load(cfg, ["swapper"])
    assert isinstance(models.swapper, SpecSwapper) and models.inswapper is None
    assert models.need_swap_model() is models.swapper
    assert models.stand_in_models == ["crossface_simswap", "simswap_256"]
    inspected = inspect_models(cfg, ["swapper"])
    assert sorted(inspected) == ["crossface_simswap", "simswap_256"] and all(i.stand_in for i in inspected.values())


def test_required_components_follow_the_source_form(rows_models_config) -> None:  # type: ignore[no-untyped-def]
    assert "embedder" in required_components(_cfg(rows_models_config, "ghost_1_256"))
    assert "embedder" not in required_components(_cfg(rows_models_config, "uniface_256"))


def test_the_enhancer_gets_the_configured_weight(rows_models_config) -> None:  # type: ignore[no-untyped-def]
    models = ModelSet.load(_cfg(rows_models_config, enhancer="codeformer", weight=0.3), ["enhancer"])
    enhancer = models.need_enhancer()
    session = recording(enhancer)
    enhancer.enhance(np.zeros((1, 512, 512, 3), np.uint8), 0.8)
    assert session.fed("weight").tolist() == [0.3] and models.stand_in_models == ["codeformer"]


@pytest.mark.parametrize(("swapper", "missing"), [("ghost_2_256", "crossface_ghost"),
                                                  ("hififace_unofficial_256", "hififace_unofficial_256")])
def test_a_missing_file_is_one_line_naming_it_and_the_download_command(rows_models_config, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                      swapper, missing) -> None:
    models_dir = tmp_path / "models"
    shutil.copytree(rows_models_config.models_dir, models_dir)
    (models_dir / f"{missing}.onnx").unlink()
    cfg = _cfg(rows_models_config.model_copy(update={"models_dir": models_dir}), swapper)
    for load in (lambda: ModelSet.load(cfg, ["swapper"]), lambda: inspect_models(cfg, ["swapper"])):
        with pytest.raises(ModelMissingError) as caught:
            load()
        text = str(caught.value)
        assert "\n" not in text and str(models_dir / f"{missing}.onnx") in text
        assert f"`fusion-ray models download {missing}`" in text


def test_unknown_enhancer_names_the_valid_ones(rows_models_config) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="--face-enhancer-model 'gpen_bfr_4096'.*codeformer.*gpen_bfr_2048"):
        ModelSet.load(_cfg(rows_models_config, enhancer="gpen_bfr_4096"), ["enhancer"])


def test_a_model_set_is_a_mapping_by_model_kind_loaded_from_the_rows(rows_models_config) -> None:  # type: ignore[no-untyped-def]
    from fusion_ray.core.modelset import model_rows

    cfg = _cfg(rows_models_config, "ghost_1_256")
    assert model_rows(cfg, "swapper") == ("crossface_ghost", "ghost_1_256")  # the converter first
    models = ModelSet.load(cfg, ["detector", "swapper"])
    assert set(models) == {"detector", "swapper"} and len(models) == 2
    assert models["swapper"] is models.need_spec_swapper() and "embedder" not in models
    assert models.embedder is None and models.inswapper is None
    assert set(models.info) == {cfg.models.detector, "crossface_ghost", "ghost_1_256"}
