"""Locations: parsing and validation, joining, confinement to an output root, glob matching."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fusion_ray.errors import InputError
from fusion_ray.storage import Location, LocationError, confine, is_under, parse_location
from fusion_ray.storage.location import match_segments, split_pattern


def test_s3_and_gs_uris() -> None:
    loc = parse_location("s3://my-bucket/clips/a.mp4")
    assert (loc.scheme, loc.bucket, loc.key) == ("s3", "my-bucket", "clips/a.mp4")
    assert loc.uri == str(loc) == "s3://my-bucket/clips/a.mp4"
    assert loc.fs_path == "my-bucket/clips/a.mp4"
    assert (loc.name, loc.stem, loc.suffix) == ("a.mp4", "a", ".mp4")
    assert loc.parent == Location("s3", "my-bucket", "clips")
    assert not loc.is_local
    gs = parse_location("gcs://b_1.x/k")
    assert (gs.scheme, gs.uri) == ("gs", "gs://b_1.x/k")
    root = parse_location("s3://bkt/out/")
    assert root.key == "out" and parse_location("s3://bkt").fs_path == "bkt"


def test_local_paths_and_file_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rel = parse_location("sub/../x.png")
    assert rel.is_local and rel.path == tmp_path / "x.png" and str(rel) == str(tmp_path / "x.png")
    assert parse_location(Path("/a/b.jpg")).key == "/a/b.jpg"
    assert parse_location("file:///a/b%20c.jpg").path == Path("/a/b c.jpg")
    assert parse_location("file://localhost/a").path == Path("/a")
    assert parse_location(str(tmp_path / "y.jpg")).uri == (tmp_path / "y.jpg").as_uri()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_location("~/z.jpg").path == tmp_path / "z.jpg"


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty"),
    ("http://host/x.mp4", "unsupported scheme 'http'"),
    ("s3:///key", "no bucket"),
    ("s3://Bad_Bucket/x", "invalid bucket name 'Bad_Bucket'"),
    ("s3://ab/x", "invalid bucket name 'ab'"),
    ("s3://bkt/a/../b", "'..'"),
    ("s3://bkt/a//b", "empty"),
    ("s3://bkt/./b", "'.'"),
    ("file://otherhost/x", "absolute local path"),
])
def test_invalid_locations_name_the_uri(text: str, says: str) -> None:
    with pytest.raises(LocationError) as caught:
        parse_location(text)
    assert isinstance(caught.value, InputError)
    assert says in str(caught.value)
    assert text in str(caught.value)
    assert "\n" not in str(caught.value)


def test_relative_paths_join_a_remote_base() -> None:
    base = parse_location("s3://bkt/manifests")
    assert parse_location("clips/a.mp4", base) == parse_location("s3://bkt/manifests/clips/a.mp4")
    assert parse_location("s3://other/x", base).bucket == "other"
    assert base / "x.mp4" == parse_location("s3://bkt/manifests/x.mp4")
    assert parse_location("s3://bkt") / "a" == parse_location("s3://bkt/a")
    assert base.joinpath("a", "b.png").key == "manifests/a/b.png"
    assert (base / "x.mp4").with_name("y.mp4").key == "manifests/y.mp4"
    with pytest.raises(LocationError, match="'..'"):
        parse_location("../escape.mp4", base)
    with pytest.raises(LocationError, match="relative path"):
        base.joinpath("/abs")
    with pytest.raises(LocationError, match="invalid file name"):
        base.with_name("a/b")


def test_local_relative_paths_join_a_local_base(tmp_path: Path) -> None:
    base = parse_location(tmp_path)
    assert parse_location("a/b.jpg", base).path == tmp_path / "a" / "b.jpg"
    assert parse_location("../c.jpg", base).path == tmp_path.parent / "c.jpg"
    assert parse_location(str(tmp_path / "d.jpg"), parse_location("s3://bkt/m")).is_local


def test_is_under_refuses_siblings_other_buckets_and_schemes() -> None:
    root = parse_location("s3://bkt/out")
    assert is_under(parse_location("s3://bkt/out/x.mp4"), root)
    assert is_under(parse_location("s3://bkt/out/a/b/x.mp4"), root)
    assert is_under(root, root)
    assert not is_under(parse_location("s3://bkt/out2/x.mp4"), root)
    assert not is_under(parse_location("s3://bkt/outx"), root)
    assert not is_under(parse_location("s3://bkt/x.mp4"), root)
    assert not is_under(parse_location("s3://other/out/x.mp4"), root)
    assert not is_under(parse_location("gs://bkt/out/x.mp4"), root)
    assert not is_under(parse_location("/bkt/out/x.mp4"), root)
    assert is_under(parse_location("s3://bkt/anything"), parse_location("s3://bkt"))


def test_confine_local_resolves_dotdot_and_links(tmp_path: Path) -> None:
    root = parse_location(tmp_path / "out")
    (tmp_path / "out").mkdir()
    assert confine(parse_location(tmp_path / "out" / "a" / "x.png"), root).path == tmp_path / "out" / "a" / "x.png"
    with pytest.raises(InputError, match="outside the output root"):
        confine(parse_location(str(tmp_path / "out") + "/../out2/x.png"), root)
    with pytest.raises(InputError, match="outside the output root"):
        confine(parse_location(str(tmp_path / "out2") + "/x.png"), root)
    os.symlink(tmp_path, tmp_path / "out" / "link")
    with pytest.raises(InputError, match="outside the output root"):
        confine(parse_location(tmp_path / "out" / "link" / "x.png"), root)
    with pytest.raises(InputError, match="s3://bkt/out2/x.mp4 is outside the output root s3://bkt/out"):
        confine(parse_location("s3://bkt/out2/x.mp4"), parse_location("s3://bkt/out"))
    assert confine(parse_location("s3://bkt/x"), None) == parse_location("s3://bkt/x")


def test_split_pattern_finds_the_fixed_prefix() -> None:
    root, rest = split_pattern(parse_location("s3://bkt/clips/2024/*.mp4"))
    assert root == parse_location("s3://bkt/clips/2024") and rest == ["*.mp4"]
    root, rest = split_pattern(parse_location("s3://bkt/*/x/**/*.png"))
    assert root == parse_location("s3://bkt") and rest == ["*", "x", "**", "*.png"]
    root, rest = split_pattern(parse_location("/data/faces/*.jpg"))
    assert root.path == Path("/data/faces") and rest == ["*.jpg"]
    assert split_pattern(parse_location("s3://bkt/a.mp4"))[1] == []


@pytest.mark.parametrize(("pattern", "path", "matches"), [
    ("*.mp4", "a.mp4", True),
    ("*.mp4", "sub/a.mp4", False),
    ("*/*.mp4", "sub/a.mp4", True),
    ("**/*.mp4", "a.mp4", True),
    ("**/*.mp4", "x/y/z/a.mp4", True),
    ("**/*.mp4", "x/.hidden/a.mp4", False),
    ("*.mp4", ".a.mp4", False),
    (".*.mp4", ".a.mp4", True),
    ("clip_[0-9].mp4", "clip_7.mp4", True),
    ("clip_?.mp4", "clip_10.mp4", False),
    ("*.MP4", "a.mp4", False),
])
def test_match_segments_follows_glob(pattern: str, path: str, matches: bool) -> None:
    assert match_segments(pattern.split("/"), path.split("/")) is matches
