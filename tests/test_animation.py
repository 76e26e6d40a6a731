"""Animated GIF, WebP and APNG: every frame read with its duration and the loop count, and
written back the same; an output that holds one frame is refused before any work."""

import dataclasses
import io

import numpy as np
import pytest
from PIL import Image

from fusion_ray.animation import check_animated_output, encode_animation, read_animation
from fusion_ray.errors import InputError
from fusion_ray.imageio import check_header

FORMATS = [("GIF", ".gif"), ("WEBP", ".webp"), ("PNG", ".png")]


def animated(fmt: str, durations=(40, 80, 120), loop: int = 2, size_wh=(30, 20)) -> bytes:
    """A test animation: one flat grey level per frame."""
    frames = [Image.fromarray(np.full((size_wh[1], size_wh[0], 3), 10 + 100 * i % 240, np.uint8)) for i in range(len(durations))]
    buffer = io.BytesIO()
    frames[0].save(buffer, fmt, save_all=True, append_images=frames[1:], duration=list(durations), loop=loop)
    return buffer.getvalue()


@pytest.mark.parametrize(("fmt", "suffix"), FORMATS)
def test_every_frame_its_duration_and_the_loop_count_are_read_and_written_back(fmt, suffix):
    data = animated(fmt)
    header = check_header(data)
    assert header.frames == 3
    animation = read_animation(data, header, "a", 10**6)
    assert np.allclose([f.frame.mean() for f in animation.frames], [10, 110, 210], atol=2)  # WebP is lossy
    assert (animation.durations_ms, animation.loop) == ((40, 80, 120), 2)
    turned = [255 - f.frame for f in animation.frames]  # what a swap changes, per frame
    out = encode_animation(turned, animation, suffix, {"k": "v"})
    again = read_animation(out, check_header(out), "b", 10**6)
    assert np.allclose([f.frame.mean() for f in again.frames], [245, 145, 45], atol=3)
    assert (again.durations_ms, again.loop) == ((40, 80, 120), 2)


@pytest.mark.parametrize("suffix", [".jpg", ".bmp", ".tif"])
def test_an_output_of_one_frame_is_refused_naming_the_format(suffix):
    header = check_header(animated("GIF"))
    with pytest.raises(InputError, match=rf"a.gif is an animated GIF of 3 frames, and '\{suffix}' holds one frame"):
        check_animated_output(header, suffix, "a.gif")


def test_the_frames_count_against_the_pixel_cap_together():
    data = animated("PNG", durations=(10,) * 5, size_wh=(100, 100))
    with pytest.raises(InputError, match="5 frames of 100x100 = 50000 pixels, over the limit of 40000"):
        read_animation(data, check_header(data), "a.png", 40_000)


def test_a_still_image_has_one_frame():
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(buffer, "GIF")
    assert check_header(buffer.getvalue()).frames == 1


def test_a_gif_whose_later_frames_grow_its_canvas_is_refused_from_its_header():
    """A 16x16 screen whose frames after the first are 9000x9000 (166 KB): the cap applies to the
    canvas Pillow decodes, before any frame is decoded (it peaked at 3.9 GB and was written)."""
    from tests.bombs import gif_bomb

    with pytest.raises(InputError, match="4 frames of 9000x9000"):
        check_header(gif_bomb(4), "bomb.gif")


def test_a_frame_growing_the_canvas_past_the_header_is_refused_before_it_is_decoded():
    """read_animation checks each frame's canvas as it is reached, whatever header it was given."""
    from tests.bombs import gif_bomb, small_gif

    header = dataclasses.replace(check_header(small_gif(frames=4)), width=16, height=16)
    with pytest.raises(InputError, match="frame 1 makes a canvas of 9000x9000"):
        read_animation(gif_bomb(4), header, "bomb.gif", 100_000_000)


def test_zero_durations_are_kept_and_missing_ones_are_100_ms():
    """A frame of 0 ms stays 0 ms (viewers apply their own minimum, to the input as to the output)."""
    from tests.bombs import small_gif

    data = small_gif(frames=3, durations=(0, 50, 0))
    animation = read_animation(data, check_header(data), "zero.gif", 100_000_000)
    assert animation.durations_ms == (0, 50, 0)
