"""fsutil: same-file checks through links, and output folders checked before any work."""

from pathlib import Path

import pytest

from fusion_ray.errors import InputError
from fusion_ray.fsutil import check_not_an_input, check_writable_dir, same_file


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
