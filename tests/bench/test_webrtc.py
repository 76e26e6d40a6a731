"""The WebRTC streams benchmark: concurrent WHIP publishers through the echo server (in this process,
and in its own process as ``fusion-ray bench webrtc`` starts it)."""

import asyncio
import json

import numpy as np
import pytest

from fusion_ray.bench.webrtc import EchoProcess, make_frames, render_markdown, run_streams
from fusion_ray.bench.webrtc_echo import EchoServer
from fusion_ray.cli import main


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    return make_frames(n_frames=30)


def test_two_streams_report_each_stream_and_the_pool(frames):
    with EchoServer() as echo:
        result = asyncio.run(run_streams(echo.url, None, frames, streams=2, seconds=1.5, codec="vp8"))
    assert result["streams"] == 2 and result["codec"] == "vp8" and len(result["fps_per_stream"]) == 2
    assert result["sent"] == 90 and result["received"] >= 45 and result["order_violations"] == 0
    assert result["fps_aggregate"] == pytest.approx(sum(result["fps_per_stream"]), abs=0.02)
    assert result["latency_ms"]["p50"] is not None and result["latency_ms"]["p99"] >= result["latency_ms"]["p50"]
    table = render_markdown([result], echo.url, (640, 360))
    assert "| 2 | vp8 |" in table and "p99 ms" in table


def test_the_echo_process_serves_with_a_token():
    with EchoProcess(token="t") as echo:
        assert echo.url.startswith("http://127.0.0.1:") and echo.url.endswith("/whip")
        assert echo.process.poll() is None
    assert echo.process.poll() is not None


def test_the_command_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "webrtc.json"
    code = main(["bench", "webrtc", "--seconds", "1.5", "--streams", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "plain aiortc echo server" in printed and "| 1 | h264 |" in printed
    (result,) = json.loads(out.read_text())
    assert result["received"] >= 20 and result["order_violations"] == 0


def test_stream_counts_are_checked(capsys):
    assert main(["bench", "webrtc", "--streams", "0"]) == 2
    assert "--streams" in capsys.readouterr().err
