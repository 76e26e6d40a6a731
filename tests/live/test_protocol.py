"""The wire protocol: start message validation, the 12-byte header, events."""

import json
import struct

import pytest

from fusion_ray.live.protocol import (
    DROP_REASONS,
    HEADER_SIZE,
    MAX_JSON_DEPTH,
    ProtocolError,
    client_json,
    dropped_event,
    pack_frame,
    pack_header,
    parse_start,
    ready_event,
    stats_event,
    unpack_frame,
)


def test_header_is_uint32_then_float64_big_endian():
    header = pack_header(7, 1234.5)
    assert len(header) == HEADER_SIZE == 12
    assert header == struct.pack(">I", 7) + struct.pack(">d", 1234.5)
    assert unpack_frame(header + b"jpeg") == (7, 1234.5, b"jpeg")
    assert unpack_frame(pack_frame(2**32 - 1, -1.0, b"")) == (2**32 - 1, -1.0, b"")


@pytest.mark.parametrize("seq", [-1, 2**32])
def test_header_refuses_sequence_numbers_outside_uint32(seq):
    with pytest.raises(ValueError):
        pack_header(seq, 0.0)


def test_short_message_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        unpack_frame(b"\x00" * 11)


def test_start_defaults_and_fields():
    start = parse_start('{"source_id": "src_1"}')
    assert (start.token, start.select, start.face_index, start.enhance, start.quality, start.deadline_ms) == (
        None, None, None, False, 85, None)  # no selection given: the server's configured one
    full = parse_start(json.dumps({"token": "t", "source_id": "s", "select": "index", "face_index": 2,
                                   "enhance": True, "quality": 60, "deadline_ms": 150, "type": "start"}))
    assert (full.token, full.select, full.face_index, full.enhance, full.quality, full.deadline_ms) == (
        "t", "index", 2, True, 60, 150)


@pytest.mark.parametrize("text", [
    "not json", "[1, 2]", "{}", '{"source_id": ""}', '{"source_id": "s", "select": "biggest"}',
    '{"source_id": "s", "quality": 0}', '{"source_id": "s", "quality": 101}', '{"source_id": "s", "face_index": -1}',
    '{"source_id": "s", "deadline_ms": 0}', '{"source_id": "s", "colour": "red"}', '{"source_id": 5}',
])
def test_malformed_start_messages(text):
    with pytest.raises(ProtocolError):
        parse_start(text)


def test_binary_first_message_is_malformed():
    with pytest.raises(ProtocolError, match="text"):
        parse_start(b'{"source_id": "s"}')


def test_events_are_json_with_a_type():
    assert json.loads(dropped_event(3, "stale")) == {"type": "dropped", "seq": 3, "reason": "stale"}
    ready = json.loads(ready_event("abc", 300, ["inswapper_128"], level=0))
    assert ready == {"type": "ready", "stream_id": "abc", "deadline_ms": 300, "stand_in_models": ["inswapper_128"],
                     "level": 0}
    stats = json.loads(stats_event(10, 7, {"stale": 2, "deadline": 1}, 40.0, 90.5, 2, "detect_every_k"))
    assert stats["type"] == "stats" and stats["frames_in"] == 10 and stats["frames_out"] == 7
    assert stats["dropped"] == {r: {"stale": 2, "deadline": 1}.get(r, 0) for r in DROP_REASONS}
    assert stats["latency_ms"] == {"p50": 40.0, "p99": 90.5} and stats["level"] == 2


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,                     # nested past any recursion limit
    '{"source_id": ' + "[" * 250 + "]" * 250 + "}",   # deeper than MAX_JSON_DEPTH inside the object
    '{"source_id": "s", "token": "' + "x" * 20_000 + '"}',  # longer than MAX_TEXT_CHARS
])
def test_deep_or_long_start_messages_are_malformed_not_a_crash(text):
    with pytest.raises(ProtocolError):
        parse_start(text)


def test_nesting_up_to_the_bound_parses():
    assert client_json("[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1), "message") is not None
