"""Whether a window can be shown: a headless OpenCV or no display is said before any work."""

from fusion_ray.live.window import opencv_gui, window_problem

HEADLESS = "General configuration\n  GUI:                           NONE\n"
GTK = "  GUI:                           GTK3\n    GTK+:                        YES (ver 3.24)\n"


def test_the_gui_backend_is_read_from_opencvs_build_information():
    assert opencv_gui(HEADLESS) is None
    assert opencv_gui(GTK) == "GTK3"
    assert opencv_gui("nothing about it") is None


def test_a_headless_opencv_or_a_missing_display_is_a_reason():
    assert "opencv-python" in (window_problem({"DISPLAY": ":0"}, "linux", HEADLESS) or "")
    assert "DISPLAY" in (window_problem({}, "linux", GTK) or "")
    assert window_problem({"WAYLAND_DISPLAY": "wayland-0"}, "linux", GTK) is None
    assert window_problem({}, "darwin", "  GUI: COCOA\n") is None


def test_this_environment_says_why_it_has_no_window():
    # The project depends on opencv-python-headless: no window, with the way out named.
    assert "headless" in (window_problem() or "")
