"""What a frame lost on its way in (ArrivalDelay), from the client's own timestamps only."""

import pytest

from fusion_ray.live.stats import ArrivalDelay


def test_a_frame_that_queued_on_the_way_in_has_lost_that_time():
    delay = ArrivalDelay()
    clock_offset = 1_000_000.0  # the client's clock is anywhere: only its differences count
    assert delay.excess_s(10.00, (10.00 + clock_offset) * 1000) == 0.0
    assert delay.excess_s(10.50, (10.20 + clock_offset) * 1000) == 0.0  # not settled yet: no verdict
    assert delay.excess_s(11.10, (11.09 + clock_offset) * 1000) == pytest.approx(0.01)
    assert delay.excess_s(11.50, (11.20 + clock_offset) * 1000) == pytest.approx(0.30)  # queued 300 ms
    assert delay.excess_s(11.60, (11.60 + clock_offset) * 1000) == pytest.approx(0.0)


def test_the_quickest_transit_is_taken_over_a_window():
    delay = ArrivalDelay(window_s=1.0)
    delay.excess_s(0.0, 1000.0)  # quick: sample -1.0
    for k in range(1, 30):  # then every frame takes 200 ms longer, for good (a slower route)
        t = k * 0.1
        excess = delay.excess_s(t + 0.2, (t + 1.0) * 1000)
    assert excess == pytest.approx(0.0)  # the old minimum left the window


@pytest.mark.parametrize("stamps", [lambda t: 0.0, lambda t: 5.0, lambda t: t * 1.0, lambda t: float("nan")])
def test_a_client_whose_stamps_do_not_keep_pace_gets_no_correction(stamps):
    """No timestamps, a constant, seconds instead of milliseconds, NaN: never a late verdict."""
    delay = ArrivalDelay()
    assert all(delay.excess_s(t / 10, stamps(t / 10)) == 0.0 for t in range(0, 100))
