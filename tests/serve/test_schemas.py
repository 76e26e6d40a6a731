"""The request schemas without Ray: the swap options from form text, and client text clipped
before an error echoes it."""

from __future__ import annotations

import pytest
from urllib3 import encode_multipart_formdata

from fusion_ray.serve.forms import parse_multipart
from fusion_ray.serve.limits import (
    ApiError,
    clip,
)
from fusion_ray.serve.schemas import SwapOptions
from tests.serve.helpers import forged_png


def test_swap_options_from_form_text():
    opts = SwapOptions.from_fields({"enhance": "true", "blend": "0.5", "select": "index", "face_index": "2",
                                    "format": "jpeg", "strict": "1", "source_id": ""})
    assert (opts.enhance, opts.blend, opts.select, opts.face_index, opts.format, opts.strict) == (
        True, 0.5, "index", 2, "jpeg", True)
    assert opts.source_id is None
    for bad in ({"select": "reference"}, {"blend": "2"}, {"format": "gif"}, {"face_index": "-1"}):
        with pytest.raises(ApiError) as err:
            SwapOptions.from_fields(bad)
        assert err.value.status == 422 and err.value.code == "invalid_option"


def test_long_client_text_is_clipped_before_it_is_echoed():
    from fusion_ray.serve.schemas import SwapRequest

    assert clip("abc") == "abc" and clip("x" * 65) == "x" * 64 + "\u2026"
    body, ctype = encode_multipart_formdata([("n" * 1_000_000, "1")])  # over python-multipart's header cap
    with pytest.raises(ApiError) as err:
        parse_multipart(body, ctype)
    assert err.value.code == "malformed_multipart" and len(err.value.detail) < 200
    name = "n" * 3000  # within the 4 KB part-header cap
    body, ctype = encode_multipart_formdata([("target", ("t.png", forged_png(4, 3), "image/png")), (name, "1")])
    with pytest.raises(ApiError) as err:
        SwapRequest.from_form(parse_multipart(body, ctype), max_pixels=100)
    assert err.value.code == "invalid_field" and len(err.value.detail) < 200
    body, ctype = encode_multipart_formdata([(name, "1"), (name, "2")])
    with pytest.raises(ApiError) as err:
        parse_multipart(body, ctype).file(name)
    assert len(err.value.detail) < 200
    body, ctype = encode_multipart_formdata([("source", ("f" * 3000 + ".jpg", b"text", "image/jpeg")),
                                             ("target", ("t.png", forged_png(4, 3), "image/png"))])
    with pytest.raises(ApiError) as err:
        SwapRequest.from_form(parse_multipart(body, ctype), max_pixels=100)
    assert err.value.status == 415 and len(err.value.detail) < 200
