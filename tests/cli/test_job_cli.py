"""``fusion-ray job``: what is refused before any work (and before Ray starts)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.animated import assert_every_frame_swapped

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
    assert f"FAILED s3://{s3_bucket}/jobs/gone.mp4 -> {tmp_path / 'gone.mp4'}: s3://{s3_bucket}/jobs/gone.mp4: no such file or object" \
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


def _unreadable_runner() -> list[str] | None:
    """A prefix that runs a command for which a mode-000 file is really unreadable: nothing as
    another user; as root, ``setpriv`` dropping the capabilities that bypass file permissions.
    None where neither is possible."""
    import os
    import shutil

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        return None
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]


@pytest.mark.ray
def test_one_bad_item_of_each_kind_fails_alone_and_the_good_ones_run(tmp_path, images_dir, scrfd_path):
    """A manifest mixing good items with a link loop, a folder, a pipe, an unreadable file, an
    empty image, an empty video and an image named .mp4: each bad item fails with its reason
    (the loop once stopped the whole job with exit 70), the good ones are done."""
    import os

    runner = _unreadable_runner()
    data = tmp_path / "in"
    data.mkdir()
    (data / "loop.jpg").symlink_to(data / "loop")
    (data / "loop").symlink_to(data / "loop.jpg")
    (data / "dir.jpg").mkdir()
    os.mkfifo(data / "fifo.jpg")
    (data / "empty.jpg").write_bytes(b"")
    (data / "empty.mp4").write_bytes(b"")
    (data / "locked.jpg").write_bytes((images_dir / "biden.jpg").read_bytes())
    (data / "locked.jpg").chmod(0)
    face = images_dir / "obama.jpg"
    expected = {
        "loop.jpg": "is a symbolic link loop", "dir.jpg": "is a folder, not a file",
        "fifo.jpg": "is not a regular file but a named pipe (FIFO)", "empty.jpg": "is empty (0 bytes)",
        "empty.mp4": "is empty (0 bytes)", "locked.jpg": "Permission denied",
    }
    if runner is None:
        del expected["locked.jpg"]  # root without setpriv: a mode-000 file is readable
    rows = [f"{face},{images_dir / 'biden.jpg'},good.png", f"{face},{images_dir / 'biden.jpg'},good2.jpg",
            f"{face},{images_dir / 'biden.jpg'},image.mp4"]
    rows += [f"{face},{data / name},{name.replace('.', '_')}{Path(name).suffix}" for name in expected]
    manifest = tmp_path / "items.csv"
    manifest.write_text("source,target,output\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([*(runner or []), sys.executable, "-m", "fusion_ray.cli", "job", "--manifest", str(manifest),
                           "--output-root", str(out), "--swapper", "classic", "--model", f"scrfd_2.5g={scrfd_path}",
                           "--providers", "cpu", "--no-progress-bars"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr  # some items failed; not a whole-job error
    report = json.loads((out / "fusion_ray_report.json").read_text())
    by_target = {Path(item["target"]).name: item for item in report["items"] if "in" in Path(item["target"]).parts}
    for name, reason in expected.items():
        assert by_target[name]["status"] == "failed" and reason in by_target[name]["error"], by_target[name]
    statuses = {Path(item["output"]).name: item["status"] for item in report["items"]}
    assert statuses["good.png"] == statuses["good2.jpg"] == "done", report
    assert statuses["image.mp4"] == "failed" and (out / "good.png").is_file() and not (out / "image.mp4").exists()
    assert "Traceback" not in proc.stderr


def test_a_report_the_store_cannot_take_is_kept_locally_and_its_place_named(tmp_path, s3_server, s3_bucket):
    """A store that stalls when the report is published: the job still ends with its items'
    outcome (here failed, exit 1; once exit 2 with no report), and the report is kept locally."""
    import os
    import re
    import shutil

    from tests.stall_proxy import stall_proxy

    storage = s3_server.storage()
    storage.write_bytes_atomic(f"s3://{s3_bucket}/jobs/m.csv", b"source,target,output\na.jpg,gone.mp4,gone.mp4\n")
    with stall_proxy(s3_server.endpoint_url, lambda method, path: method == "PUT" and "fusion_ray_report" in path) \
            as proxy:
        env = {**os.environ, **s3_server.env(), "AWS_ENDPOINT_URL": proxy.endpoint_url}
        proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "job", "--manifest", f"s3://{s3_bucket}/jobs/m.csv",
                               "--output-root", f"s3://{s3_bucket}/out", "--providers", "cpu"], capture_output=True,
                              text=True, timeout=300, env=env)
        assert proxy.stalled, proc.stderr
    assert proc.stdout.split() == ["1", "False"], proc.stderr
    found = re.search(r"error: the report could not be published \(.*\); it is kept at (\S+) \(rows: (\S+)\)",
                      proc.stderr)
    assert found, proc.stderr
    kept = Path(found.group(1))
    report = json.loads(kept.read_text())
    assert report["counts"] == {"failed": 1} and Path(found.group(2)).is_file()
    shutil.rmtree(kept.parent)


def test_animated_images_are_swapped_whole_by_the_local_runner(tmp_path, images_dir, scrfd_path):
    """``--runner local`` swaps an animated GIF and APNG frame by frame in-process (the function
    the Ray runner's task wraps), kept animated; one named .jpg fails at planning; no Ray."""

    from tests.cli.test_swap_cli import face_animation

    gif, apng = tmp_path / "anim.gif", tmp_path / "anim.png"
    gif.write_bytes(face_animation(images_dir, "GIF"))
    apng.write_bytes(face_animation(images_dir, "PNG"))
    source = images_dir / "biden.jpg"
    manifest = tmp_path / "items.csv"
    manifest.write_text(f"source,target,output\n{source},{gif},anim.gif\n{source},{apng},anim.png\n"
                        f"{source},{gif},anim.jpg\n")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "job", "--manifest", str(manifest), "--output-root",
                           str(out), "--runner", "local", "--swapper", "classic", "--model",
                           f"scrfd_2.5g={scrfd_path}", "--providers", "cpu"], capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.split() == ["1", "False"], proc.stderr  # the .jpg item failed; Ray never started
    report = json.loads((out / "fusion_ray_report.json").read_text())
    items = {Path(item["output"]).name: item for item in report["items"]}
    assert items["anim.jpg"]["status"] == "failed" and "'.jpg' holds one frame" in items["anim.jpg"]["error"]
    assert report["frames"] == 6
    for name in ("anim.gif", "anim.png"):
        item = items[name]
        assert (item["status"], item["frames"], item["faces_swapped"]) == ("done", 3, 3), item
        assert_every_frame_swapped(tmp_path / name, out / name, [40, 80, 120])
    assert "at most 256 colours each" in items["anim.gif"]["warnings"][0]
    assert "Traceback" not in proc.stderr
