"""Multipart bodies without Ray: streamed and counted against the cap, a stalled body's timeout,
the parser's answers to binary data, bad content types, truncation and too many parts."""

from __future__ import annotations

import asyncio

import pytest
from urllib3 import encode_multipart_formdata

from fusion_ray.serve.forms import parse_multipart, read_form
from fusion_ray.serve.limits import ApiError
from tests.serve.helpers import forged_png


def _chunks(body: bytes, size: int):
    async def gen():
        for i in range(0, len(body), size):
            yield body[i:i + size]
    return gen()


def test_streamed_bytes_are_counted():
    body, ctype = encode_multipart_formdata([("target", ("t.png", b"x" * 300, "image/png"))])
    form = asyncio.run(read_form(_chunks(body, 100), ctype, max_bytes=len(body), timeout_s=30, max_parts=4))
    assert form.file("target").data == b"x" * 300
    with pytest.raises(ApiError) as err:
        asyncio.run(read_form(_chunks(body, 100), ctype, max_bytes=len(body) - 1, timeout_s=30, max_parts=4))
    assert err.value.status == 413
    garbage = [b"x" * 100] * 5  # not multipart at all, and over the cap: 413 first (as a chunked upload gets)
    with pytest.raises(ApiError) as err:
        asyncio.run(read_form(_chunks(b"".join(garbage), 100), ctype, max_bytes=400, timeout_s=30, max_parts=4))
    assert err.value.status == 413
    with pytest.raises(ApiError) as err:  # within the cap: the parse error
        asyncio.run(read_form(_chunks(b"".join(garbage), 100), ctype, max_bytes=1000, timeout_s=30, max_parts=4))
    assert err.value.status == 400


def test_a_stalled_body_is_408_instead_of_holding_its_slot():
    body, ctype = encode_multipart_formdata([("strict", "true")])

    async def stalled():
        yield body[:10]
        await asyncio.Event().wait()  # the client sends nothing more but keeps the connection
        yield b"never"

    with pytest.raises(ApiError) as err:
        asyncio.run(read_form(stalled(), ctype, max_bytes=400, timeout_s=0.05, max_parts=4))
    assert err.value.status == 408 and err.value.code == "receive_timeout"
    form = asyncio.run(read_form(_chunks(body, 7), ctype, max_bytes=400, timeout_s=30, max_parts=4))
    assert form.text_fields() == {"strict": "true"}
    with pytest.raises(ApiError) as err:  # the size cap still applies
        asyncio.run(read_form(_chunks(body, 7), ctype, max_bytes=5, timeout_s=30, max_parts=4))
    assert err.value.status == 413


def test_multipart_round_trip_with_binary_data():
    tricky = b"\r\n--not-the-boundary\r\n\r\n" + bytes(range(256)) * 50 + b"\r\n"
    body, ctype = encode_multipart_formdata([
        ("target", ("t.png", tricky, "image/png")),
        ("source", ("a.jpg", b"AAA", "image/jpeg")),
        ("source", ("b.jpg", b"", "image/jpeg")),
        ("source_id", "src_1"),
        ("strict", "true"),
    ])
    form = parse_multipart(body, ctype)
    assert form.file("target").data == tricky
    assert form.file("target").filename == "t.png"
    assert [p.data for p in form.files("source")] == [b"AAA", b""]
    assert form.text_fields() == {"source_id": "src_1", "strict": "true"}
    with pytest.raises(ApiError, match="given 2 times"):
        form.file("source")


def test_images_without_a_filename_are_not_text_fields():
    png = forged_png(4, 3)  # b"\x89PNG...": not UTF-8
    body, ctype = encode_multipart_formdata([  # a value without a filename, like curl -F 'target=<t.png'
        ("target", png), ("source", b"\xff\xd8\xff\xe0"), ("image", b"\x89"), ("strict", "true")])
    form = parse_multipart(body, ctype)
    assert form.file("target").filename is None and form.file("target").data == png
    assert form.text_fields() == {"strict": "true"}
    body, ctype = encode_multipart_formdata([("target", png), ("source_id", b"\xff")])
    with pytest.raises(ApiError, match="'source_id' is not UTF-8") as err:
        parse_multipart(body, ctype).text_fields()
    assert err.value.status == 422


@pytest.mark.parametrize("ctype,status", [(None, 415), ("application/json", 415),
                                          ("multipart/form-data", 400)])
def test_multipart_content_type(ctype, status):
    with pytest.raises(ApiError) as err:
        parse_multipart(b"{}", ctype)
    assert err.value.status == status


def test_truncated_multipart_is_400():
    body, ctype = encode_multipart_formdata([("target", ("t.png", b"x" * 100, "image/png"))])
    with pytest.raises(ApiError) as err:
        parse_multipart(body[:-30], ctype)
    assert err.value.status == 400


def test_too_many_parts():
    body, ctype = encode_multipart_formdata([("f", str(i)) for i in range(10)])
    with pytest.raises(ApiError) as err:
        parse_multipart(body, ctype, max_parts=5)
    assert err.value.status == 422
