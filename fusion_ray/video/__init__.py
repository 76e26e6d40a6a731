"""PyAV video layer under the Ray Data pipeline: probe, plan, decode, encode, join.

docs/ARCHITECTURE.md, Videos: a video is split at keyframes into segments of a few seconds
(plan_segments, from packet timestamps only); each segment is decoded on its own
(decode_segment, a generator), processed, and encoded to a small standalone MP4
(encode_segment); the segments are joined by stream copy with the source's audio copied in
(join_segments; a variable-frame-rate source keeps its frame timestamps, FrameTimes), and
the result is renamed into place. Frames are BGR uint8 HxWx3 arrays; frame indices are
global and in presentation order; frame rates are exact Fractions.

No Ray here; library code logs and raises fusion_ray.errors.VideoError naming the file.
"""

from fusion_ray.video.decode import DecodedFrame, decode_all, decode_segment
from fusion_ray.video.encode import (
    VIDEO_OUTPUT_SUFFIXES,
    EncodeOptions,
    check_encodable,
    check_video_output,
    encode_segment,
    encoder_pix_fmt,
    join_segments,
    nvenc_usable,
    pix_fmt_change,
    resolve_codec,
)
from fusion_ray.video.probe import VideoInfo, choose_fps, is_video_file, probe
from fusion_ray.video.segments import Segment, plan_segments
from fusion_ray.video.synthetic import make_corrupt_video, make_test_video
from fusion_ray.video.timing import FrameTimes, read_frame_times

__all__ = [
    "VIDEO_OUTPUT_SUFFIXES",
    "DecodedFrame",
    "EncodeOptions",
    "FrameTimes",
    "Segment",
    "VideoInfo",
    "check_encodable",
    "check_video_output",
    "choose_fps",
    "decode_all",
    "decode_segment",
    "encode_segment",
    "encoder_pix_fmt",
    "pix_fmt_change",
    "is_video_file",
    "join_segments",
    "make_corrupt_video",
    "make_test_video",
    "nvenc_usable",
    "plan_segments",
    "probe",
    "read_frame_times",
    "resolve_codec",
]
