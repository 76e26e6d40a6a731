"""``fusion-ray job``: what is refused before any work (and before Ray starts)."""

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


def test_an_output_root_in_a_bucket_is_refused_for_now(capsys):
    from fusion_ray.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["job", "--manifest", "m.csv", "--output-root", "s3://some-bucket/out"])
    assert exit_info.value.code == 2
    assert "s3://some-bucket/out: an output root in a bucket is not supported yet" in capsys.readouterr().err
