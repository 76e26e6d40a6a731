"""fsutil: same-file checks through links, and output folders checked before any work."""

import os
from pathlib import Path

import pytest

from fusion_ray.errors import InputError
from fusion_ray.fsutil import (
    check_input_file,
    check_not_an_input,
    check_writable_dir,
    resolve_path,
    same_file,
)


def test_same_file_follows_symbolic_and_hard_links(tmp_path: Path) -> None:
    real = tmp_path / "a.png"
    real.write_bytes(b"x")
    (tmp_path / "soft.png").symlink_to(real)
    (tmp_path / "hard.png").hardlink_to(real)
    (tmp_path / "other.png").write_bytes(b"x")
    assert same_file(tmp_path / "soft.png", real) and same_file(tmp_path / "hard.png", real)
    assert same_file(tmp_path / "sub" / ".." / "a.png", real)
    assert not same_file(tmp_path / "other.png", real)
    assert not same_file(tmp_path / "missing.png", real)


def test_check_not_an_input_names_both_arguments(tmp_path: Path) -> None:
    target = tmp_path / "t.mp4"
    target.write_bytes(b"x")
    check_not_an_input(tmp_path / "out.mp4", [("--target", target)])
    with pytest.raises(InputError, match=r"--output .*t\.mp4 is the same file as --target .*t\.mp4"):
        check_not_an_input(target, [("--source", tmp_path / "s.png"), ("--target", target)])


def test_check_writable_dir_refuses_missing_and_unwritable_folders(tmp_path: Path) -> None:
    check_writable_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []  # the probe file is gone
    with pytest.raises(InputError, match="output folder does not exist"):
        check_writable_dir(tmp_path / "nope")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(InputError, match="not a folder"):
        check_writable_dir(tmp_path / "file")
    # /sys refuses new files even to root (chmod does not stop root; this does).
    with pytest.raises(InputError, match=r"^output folder is not writable: /sys \("):
        check_writable_dir(Path("/sys"))


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    """One of each kind of input that is not a readable regular file with content."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop.png")
    (tmp_path / "loop.png").symlink_to(tmp_path / "loop")
    (tmp_path / "dir.png").mkdir()
    os.mkfifo(tmp_path / "fifo.png")
    (tmp_path / "empty.mp4").write_bytes(b"")
    return {name: tmp_path / name for name in ("loop.png", "dir.png", "fifo.png", "empty.mp4", "missing.png")}


CHECKS = [
    ("loop.png", "target {} is a symbolic link loop"),
    ("dir.png", "target {} is a folder, not a file"),
    ("fifo.png", "target {} is not a regular file but a named pipe (FIFO)"),
    ("empty.mp4", "target {} is empty (0 bytes)"),
    ("missing.png", "file not found: {}"),
]


@pytest.mark.parametrize(("name", "message"), CHECKS, ids=[name for name, _ in CHECKS])
def test_check_input_file_names_the_real_problem(tmp_path: Path, name: str, message: str) -> None:
    path = _bad_inputs(tmp_path)[name]
    with pytest.raises(InputError) as caught:
        check_input_file(path, "target")  # a pipe is never opened: this would block
    assert str(caught.value) == message.format(path)


def test_check_input_file_passes_a_readable_file(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"x")
    check_input_file(tmp_path / "a.png")


def test_a_symbolic_link_loop_is_an_input_error_not_a_runtime_error(tmp_path: Path) -> None:
    loop = _bad_inputs(tmp_path)["loop.png"]
    with pytest.raises(InputError, match="is a symbolic link loop"):
        resolve_path(loop)
    with pytest.raises(InputError, match="is a symbolic link loop"):
        check_not_an_input(tmp_path / "out.png", [("--target", loop)])
