"""A WebRTC SDP offer, checked before any peer connection is made (WHIP and WHEP).

:func:`check_offer` parses the offer with aiortc's SDP parser and refuses, with a status and a
reason, what the service cannot take: not an SDP (400), no video sent (422), more video sections
than one sendrecv or one send and one receive (422: an offer with 50 video tracks costs nothing),
no video codec we decode (415: we take VP8 and H.264, aiortc's two), a body over
:data:`MAX_OFFER_BYTES` (413). :func:`check_viewer_offer` asks the same of a WHEP viewer, which
receives video instead of sending it.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiortc import sdp

from fusion_ray.errors import InputError

MAX_OFFER_BYTES = 128 * 1024
MAX_VIDEO_SECTIONS = 2
MAX_SECTIONS = 4
VIDEO_CODECS = ("VP8", "H264")
"""The video codecs sessions take, both ways (aiortc's)."""


class OfferError(InputError):
    """An offer the service refuses: an HTTP status, a code and the reason."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class OfferInfo:
    """A checked offer: its text, the direction of each media section by mid (the offerer's view)
    and the video codecs it names."""

    sdp: str
    directions: dict[str, str]
    video_codecs: tuple[str, ...]
    audio: bool


def parse_offer(text: str) -> tuple[OfferInfo, list[sdp.MediaDescription]]:
    """Parse an offer (OfferError 400/413 for what is not one)."""
    if len(text.encode("utf-8", "replace")) > MAX_OFFER_BYTES:
        raise OfferError(413, "offer_too_large", f"the SDP offer is over {MAX_OFFER_BYTES} bytes")
    if not text.lstrip().startswith("v=0"):
        raise OfferError(400, "bad_sdp", "the body is not an SDP offer (it must start with v=0)")
    try:
        parsed = sdp.SessionDescription.parse(text)
    except Exception as exc:  # aiortc's parser raises whatever the text trips on
        raise OfferError(400, "bad_sdp", f"the SDP offer cannot be parsed: {type(exc).__name__}: {exc}") from exc
    if parsed.origin is None or not parsed.media:
        raise OfferError(400, "bad_sdp", "the SDP offer has no origin (o=) line or no media (m=) section")
    media = [m for m in parsed.media if m.kind in ("audio", "video", "application")]
    if len(parsed.media) > MAX_SECTIONS:
        raise OfferError(422, "too_many_tracks", f"the offer has {len(parsed.media)} media sections; "
                         f"at most {MAX_SECTIONS} are taken (video, audio, a data channel)")
    if any(m.rtp.muxId in ("", None) for m in media):
        raise OfferError(400, "bad_sdp", "every media section of the offer needs an a=mid")
    video = [m for m in media if m.kind == "video"]
    if len(video) > MAX_VIDEO_SECTIONS:
        raise OfferError(422, "too_many_tracks", f"the offer has {len(video)} video sections; at most "
                         f"{MAX_VIDEO_SECTIONS} are taken (one sendrecv, or one to send and one to receive)")
    names = tuple(sorted({c.mimeType.split("/")[-1].upper() for m in video for c in m.rtp.codecs}))
    info = OfferInfo(text, {str(m.rtp.muxId): str(m.direction or "sendrecv") for m in media}, names,
                     any(m.kind == "audio" for m in media))
    return info, video


def _check_codecs(video: list[sdp.MediaDescription]) -> None:
    for section in video:
        offered = {c.mimeType.split("/")[-1].upper() for c in section.rtp.codecs}
        if not offered & set(VIDEO_CODECS):
            raise OfferError(415, "unsupported_codec", f"the offer's video codecs ({', '.join(sorted(offered)) or 'none'}) "
                             f"include none of {', '.join(VIDEO_CODECS)}")


def check_offer(text: str) -> OfferInfo:
    """A publisher's offer: it must send video (a camera) in a codec we decode."""
    info, video = parse_offer(text)
    sending = [m for m in video if (m.direction or "sendrecv") in ("sendrecv", "sendonly")]
    if not sending:
        raise OfferError(422, "no_video", "the offer sends no video (a WHIP offer needs a camera track "
                         "with direction sendrecv or sendonly)")
    _check_codecs(video)
    return info


def check_viewer_offer(text: str) -> OfferInfo:
    """A viewer's offer (WHEP): it must receive video in a codec we encode."""
    info, video = parse_offer(text)
    if not [m for m in video if (m.direction or "sendrecv") in ("sendrecv", "recvonly")]:
        raise OfferError(422, "no_video", "the offer receives no video (a WHEP offer needs a video "
                         "transceiver with direction recvonly)")
    _check_codecs(video)
    return info
