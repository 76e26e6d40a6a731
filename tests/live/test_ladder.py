"""The degradation ladder: a table of windows and the levels they lead to (hysteresis)."""

import pytest

from fusion_ray.config import EngineConfig
from fusion_ray.core.facefusion_options import FaceFusionOptions, configured
from fusion_ray.live.config import LEVEL_NAMES, LadderConfig
from fusion_ray.live.ladder import (
    Degradation,
    Health,
    LadderState,
    degradation,
    is_costly,
    step,
    verdict,
    without_costly,
)

CFG = LadderConfig(degrade_after_s=2.0, recover_after_s=4.0)
DEADLINE = 300.0
BAD = Health(1.0, 30, 15, 100.0)      # half the frames dropped
SLOW = Health(1.0, 30, 0, 290.0)      # p99 near the deadline
GOOD = Health(1.0, 30, 0, 50.0)
MIDDLE = Health(1.0, 30, 3, 50.0)     # 10% drops: neither healthy nor unhealthy
IDLE = Health(1.0, 0, 0, None)


@pytest.mark.parametrize(("health", "expected"), [
    (BAD, "unhealthy"), (SLOW, "unhealthy"), (GOOD, "healthy"), (MIDDLE, "neutral"), (IDLE, "idle"),
    (Health(1.0, 30, 0, 200.0), "neutral"),  # latency between recover (150) and degrade (240)
])
def test_verdict(health, expected):
    assert verdict(health, DEADLINE, CFG) == expected


def run(windows, cfg=CFG, state=None):
    state = state or LadderState()
    levels = []
    for health in windows:
        state = step(state, health, DEADLINE, cfg)
        levels.append(state.level)
    return levels


@pytest.mark.parametrize(("windows", "levels"), [
    # Two unhealthy seconds step down one level; two more, one more.
    ([BAD, BAD, BAD, BAD], [0, 1, 1, 2]),
    ([SLOW, SLOW], [0, 1]),
    # One bad second alone does nothing; a neutral window resets the count.
    ([BAD, MIDDLE, BAD, GOOD, BAD], [0, 0, 0, 0, 0]),
    # Idle windows neither count nor reset.
    ([BAD, IDLE, BAD], [0, 0, 1]),
    # Never past the last level.
    ([BAD] * 12, [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 5]),
])
def test_stepping_down(windows, levels):
    assert run(windows) == levels


def test_stepping_up_needs_a_longer_healthy_window():
    state = LadderState(level=3)
    assert run([GOOD, GOOD, GOOD, GOOD, GOOD, GOOD, GOOD, GOOD], state=state) == [3, 3, 3, 2, 2, 2, 2, 1]
    # A neutral window in between restarts the healthy count.
    assert run([GOOD, GOOD, GOOD, MIDDLE, GOOD, GOOD, GOOD, GOOD], state=state) == [3, 3, 3, 3, 3, 3, 3, 2]
    assert run([GOOD] * 4, state=LadderState(level=0)) == [0, 0, 0, 0]


def test_hysteresis_no_flapping_around_one_threshold():
    # Alternating bad/good seconds never move the level in either direction.
    assert run([BAD, GOOD] * 6, state=LadderState(level=2)) == [2] * 12


def test_only_allowed_levels_are_used():
    cfg = LadderConfig(allowed_levels=(0, 2, 4), degrade_after_s=1.0, recover_after_s=1.0)
    assert run([BAD, BAD, BAD], cfg) == [2, 4, 4]
    assert run([GOOD, GOOD, GOOD], cfg, LadderState(level=4)) == [2, 0, 0]
    assert run([BAD] * 3, LadderConfig(allowed_levels=(0,), degrade_after_s=1.0)) == [0, 0, 0]


def test_degradations_are_cumulative_and_skip_disallowed_levels():
    assert degradation(0, CFG) == Degradation(True, True, 1, None, None)
    level1 = degradation(1, CFG)  # model masks and pixel boost go first, before the enhancer
    assert (level1.costly, level1.enhance, level1.detect_every) == (False, True, 1)
    assert degradation(2, CFG).enhance is False and degradation(2, CFG).costly is False
    level3 = degradation(3, CFG)
    assert (level3.enhance, level3.detect_every, level3.detector_size) == (False, CFG.detect_every, None)
    assert degradation(4, CFG).detector_size == CFG.small_detector_size
    assert degradation(5, CFG).quality_cap == CFG.low_quality
    skip = LadderConfig(allowed_levels=(0, 4))
    assert degradation(4, skip) == Degradation(True, True, 1, skip.small_detector_size, None)


def test_level_names_start_with_the_model_masks():
    assert LEVEL_NAMES[:3] == ("normal", "masks_off", "enhancer_off") and len(LEVEL_NAMES) == 6


def _base(types: tuple[str, ...] = ("box",), boost: int | None = None) -> EngineConfig:
    """A host's engine config (its defaults, or its command line) with these mask types and pixel boost."""
    return EngineConfig.model_validate({"masks": {"types": list(types)}, "swap": {"pixel_boost": boost},
                                        "landmarker": {"model": "2dfan4"}})


@pytest.mark.parametrize(("options", "base", "types", "boost"), [
    # The request's own mask types without the model masks; its pixel boost down to the model's size (128).
    ({"face_mask_types": "box occlusion region", "face_swapper_pixel_boost": "512x512"}, _base(), ("box",), "128x128"),
    ({"face_mask_types": "area region"}, _base(), ("area",), None),
    ({"face_mask_types": "occlusion"}, _base(), ("box",), None),  # nothing left: the box mask
    # No options of its own: the host's model masks and pixel boost go too (None would keep the host's boost).
    ({}, _base(("box", "occlusion"), boost=256), ("box",), "128x128"),
    ({}, _base(("box", "area")), ("box", "area"), None),
    ({"face_mask_types": "box"}, _base(("box", "region"), boost=512), ("box",), "128x128"),
])
def test_without_costly_drops_the_model_masks_and_the_pixel_boost(options, base, types, boost):
    given = FaceFusionOptions.model_validate({**options, "face_mask_blur": 0.5})
    light = without_costly(given, base)
    assert light.face_mask_types == types and light.face_swapper_pixel_boost == boost
    assert light.face_mask_blur == 0.5  # the rest is kept
    light_cfg = configured(base, light)
    assert light_cfg.swap.pixel_boost in (None, 128) and not is_costly(light_cfg)


@pytest.mark.parametrize(("options", "base", "costly"), [
    ({}, _base(), False),
    ({}, _base(("box", "occlusion")), True),  # a service default with a model mask
    ({}, _base(boost=256), True),  # a pixel boost on the command line
    ({}, _base(boost=128), False),  # the model's own size: nothing to turn off
    ({"face_mask_types": "box"}, _base(("box", "occlusion")), False),
    ({"face_swapper_pixel_boost": "256"}, _base(), True),
    ({"face_mask_types": "area region"}, _base(), True),
])
def test_is_costly_looks_at_the_resulting_config(options, base, costly):
    assert is_costly(configured(base, FaceFusionOptions.model_validate(options))) is costly


@pytest.mark.parametrize("bad", [{"allowed_levels": (1, 2)}, {"allowed_levels": (0, 6)}, {"allowed_levels": (0, 2, 1)},
                                 {"recover_drop_rate": 0.5, "degrade_drop_rate": 0.2}, {"small_detector_size": 300}])
def test_ladder_config_validation(bad):
    with pytest.raises(ValueError):
        LadderConfig(**bad)
