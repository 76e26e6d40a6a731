"""``fusion-ray job``: what is refused before any work (and before Ray starts)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

RAY_STARTED = """
import sys
from fusion_ray.cli import main
code = main(sys.argv[1:])
ray = sys.modules.get("ray")
print(code, bool(ray is not None and ray.is_initialized()))
"""


@pytest.mark.parametrize("where", ["sys", "missing", "file"])
def test_an_output_root_that_cannot_be_written_is_one_line_before_ray(where, tmp_path, images_dir):
    root = {"sys": Path("/sys"), "missing": tmp_path / "missing", "file": images_dir / "obama.jpg"}[where]
    proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "job", "--source-pattern", str(images_dir / "biden.jpg"),
                           "--target-pattern", str(images_dir / "obama.jpg"), "--output-root", str(root),
                           "--providers", "cpu", "--no-progress-bars"], capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["2", "False"], proc.stderr
    expected = {"sys": "output root is not writable: /sys (Permission denied)",
                "missing": f"output root does not exist: {root}", "file": f"output root is not a folder: {root}"}
    assert proc.stderr.strip().splitlines() == [f"error: {expected[where]}"]


def test_a_manifest_in_a_bucket_is_read_with_the_aws_environment(tmp_path, s3_server, s3_bucket):
    """The CLI reads the standard AWS variables once: a manifest in the bucket, its missing
    targets failed per item in one line each, before Ray (nothing runs)."""
    import os

    storage = s3_server.storage()
    storage.write_bytes_atomic(f"s3://{s3_bucket}/jobs/m.csv", b"source,target,output\na.jpg,gone.mp4,gone.mp4\n")
    env = {**os.environ, **s3_server.env()}
    proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "job", "--manifest", f"s3://{s3_bucket}/jobs/m.csv",
                           "--output-root", str(tmp_path), "--providers", "cpu", "--no-progress-bars"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.stdout.split() == ["1", "False"], proc.stderr
    assert f"FAILED s3://{s3_bucket}/jobs/gone.mp4: s3://{s3_bucket}/jobs/gone.mp4: no such file or object" \
        in proc.stderr.splitlines()
    wrong = {**env, "AWS_SECRET_ACCESS_KEY": "wrong"}
    proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "job", "--manifest", f"s3://{s3_bucket}/jobs/m.csv",
                           "--output-root", str(tmp_path), "--providers", "cpu"], capture_output=True, text=True,
                          timeout=300, env=wrong)
    assert proc.stdout.split() == ["2", "False"], proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: s3://{s3_bucket}/jobs/m.csv: access denied to read")
    # An output root in the bucket: the report is published there, beside the outputs.
    proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "job", "--manifest", f"s3://{s3_bucket}/jobs/m.csv",
                           "--output-root", f"s3://{s3_bucket}/out", "--providers", "cpu"], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.stdout.split() == ["1", "False"], proc.stderr
    assert f"report: s3://{s3_bucket}/out/fusion_ray_report.json" in proc.stderr.splitlines()
    report = json.loads(storage.read_bytes(f"s3://{s3_bucket}/out/fusion_ray_report.json"))
    assert report["counts"] == {"failed": 1} and report["items"][0]["output"] == f"s3://{s3_bucket}/out/gone.mp4"
    (row,) = storage.read_bytes(f"s3://{s3_bucket}/out/fusion_ray_report.jsonl").decode().splitlines()
    assert json.loads(row) == {"index": 0, **report["items"][0]}


@pytest.mark.parametrize("case", ["wrong bucket", "wrong credentials", "not a bucket name"])
def test_an_output_root_in_a_bucket_that_cannot_be_written_is_one_line_before_ray(case, s3_server, s3_bucket,
                                                                                   images_dir):
    import os

    root, env, expected = {
        "wrong bucket": ("s3://fr-no-such-bucket/out", s3_server.env(), "no such bucket"),
        "wrong credentials": (f"s3://{s3_bucket}/out", {**s3_server.env(), "AWS_SECRET_ACCESS_KEY": "wrong"},
                              "access denied to write"),
        "not a bucket name": ("s3://Not_A_Bucket/out", s3_server.env(), "invalid bucket name"),
    }[case]
    proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "job", "--source-pattern", str(images_dir / "biden.jpg"),
                           "--target-pattern", str(images_dir / "obama.jpg"), "--output-root", root,
                           "--providers", "cpu"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    assert proc.stdout.split() == ["2", "False"], proc.stderr
    (line,) = [line for line in proc.stderr.strip().splitlines() if line.startswith("error") or "error:" in line]
    assert expected in line and (root in line or case == "wrong bucket"), line
