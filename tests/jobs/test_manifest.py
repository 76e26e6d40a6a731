import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fusion_ray.errors import InputError
from fusion_ray.jobs.manifest import check_unique_outputs, expand_patterns, read_manifest
from fusion_ray.runners.job import JobItem, confine


def test_csv_manifest(tmp_path):
    (tmp_path / "m.csv").write_text(
        "source,target,output,options\n"
        "a.jpg;b.jpg,clip.mp4,out/clip.mp4,\n"
        '/abs/s.jpg,/abs/t.png,t.png,"{""selection"": {""mode"": ""largest""}}"\n')
    items = read_manifest(tmp_path / "m.csv", tmp_path / "root")
    assert items[0] == JobItem((tmp_path / "a.jpg", tmp_path / "b.jpg"), tmp_path / "clip.mp4",
                               tmp_path / "root" / "out/clip.mp4", "{}")
    assert json.loads(items[1].options) == {"selection": {"mode": "largest"}}
    assert items[1].target.as_posix() == "/abs/t.png"


def test_csv_manifest_saved_by_excel(tmp_path):
    """Excel's "CSV UTF-8" starts with a byte-order mark, which must not become part of 'source'."""
    (tmp_path / "m.csv").write_bytes("source,target,output\r\nvisage-é.jpg,clip.mp4,out.mp4\r\n".encode("utf-8-sig"))
    items = read_manifest(tmp_path / "m.csv", tmp_path / "root")
    assert items == [JobItem((tmp_path / "visage-é.jpg",), tmp_path / "clip.mp4", tmp_path / "root" / "out.mp4", "{}")]


def test_parquet_manifest(tmp_path):
    pq.write_table(pa.table({"source": ["s.jpg"], "target": ["t.mp4"], "output": ["o.mp4"]}), tmp_path / "m.parquet")
    (item,) = read_manifest(tmp_path / "m.parquet", tmp_path)
    assert item.output == tmp_path / "o.mp4" and item.options == "{}"


@pytest.mark.parametrize("content,message", [
    ("source,target\na,b\n", "lacks column"),
    ("source,target,output\n", "no rows"),
    ("source,target,output\na,,o\n", "missing value"),
    ("source,target,output,options\na,b,c,not json\n", "not valid JSON"),
    ("source,target,output,options\na,b,c,[1]\n", "JSON object"),
])
def test_bad_manifests(tmp_path, content, message):
    (tmp_path / "m.csv").write_text(content)
    with pytest.raises(InputError, match=message):
        read_manifest(tmp_path / "m.csv", tmp_path)


def test_manifest_kind_and_presence(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_manifest(tmp_path / "nope.csv", tmp_path)
    (tmp_path / "m.txt").write_text("x")
    with pytest.raises(InputError, match=".csv or .parquet"):
        read_manifest(tmp_path / "m.txt", tmp_path)


def test_patterns_are_a_cartesian_product(tmp_path):
    for name in ("a.jpg", "b.jpg", "x.mp4", "y.png"):
        (tmp_path / name).write_bytes(b"")
    items = expand_patterns(str(tmp_path / "*.jpg"), str(tmp_path / "[xy].*"),
                            "{index}-{source_name}-{target_name}.{target_extension}", tmp_path / "out")
    assert [i.output.name for i in items] == ["0-a-x.mp4", "1-a-y.png", "2-b-x.mp4", "3-b-y.png"]
    assert all(i.output.parent == tmp_path / "out" for i in items)


def test_pattern_errors(tmp_path):
    with pytest.raises(InputError, match="source pattern"):
        expand_patterns(str(tmp_path / "*.jpg"), "*", "{target_name}", tmp_path)
    (tmp_path / "a.jpg").write_bytes(b"")
    with pytest.raises(InputError, match="placeholder"):
        expand_patterns(str(tmp_path / "*.jpg"), str(tmp_path / "*.jpg"), "{nope}", tmp_path)
    items = expand_patterns(str(tmp_path / "*.jpg"), str(tmp_path / "*.jpg"), "same.png", tmp_path)
    check_unique_outputs(items)
    with pytest.raises(InputError, match="two items write"):
        check_unique_outputs(items * 2)


@pytest.mark.parametrize("output,ok", [("a/b.mp4", True), ("../escape.mp4", False), ("a/../../x.mp4", False)])
def test_outputs_are_confined_to_the_root(tmp_path, output, ok):
    root = tmp_path / "root"
    root.mkdir()
    if ok:
        assert confine(root / output, root).is_relative_to(root)
    else:
        with pytest.raises(InputError, match="outside the output root"):
            confine(root / output, root)



# Manifests and patterns in a bucket of the session's moto S3 server (tests/s3_server.py)


def test_a_manifest_in_a_bucket_resolves_relative_paths_in_its_folder(s3_server, s3_bucket, tmp_path):
    from pathlib import Path

    from fusion_ray.storage import Location

    storage = s3_server.storage()
    text = "source,target,output\r\na.jpg;s3://other-bucket/b.jpg,clips/c.mp4,out/c.mp4\r\n/abs/s.jpg,t.png,t.png\r\n"
    storage.write_bytes_atomic(f"s3://{s3_bucket}/jobs/m.csv", text.encode("utf-8-sig"))
    items = read_manifest(f"s3://{s3_bucket}/jobs/m.csv", tmp_path, storage)
    base = Location.parse(f"s3://{s3_bucket}/jobs")
    assert items[0] == JobItem((base / "a.jpg", Location.parse("s3://other-bucket/b.jpg")), base / "clips/c.mp4",
                               tmp_path / "out/c.mp4", "{}")
    assert items[1].sources == (Path("/abs/s.jpg"),) and items[1].target == base / "t.png"
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"source": ["s.jpg"], "target": ["t.mp4"], "output": ["o.mp4"]}), sink)
    storage.write_bytes_atomic(f"s3://{s3_bucket}/jobs/m.parquet", sink.getvalue().to_pybytes())
    (item,) = read_manifest(f"s3://{s3_bucket}/jobs/m.parquet", tmp_path, storage)
    assert item == JobItem((base / "s.jpg",), base / "t.mp4", tmp_path / "o.mp4", "{}")


def test_a_manifest_in_a_bucket_is_checked_as_a_local_one(s3_server, s3_bucket, tmp_path):
    from fusion_ray.storage import ObjectNotFoundError

    storage = s3_server.storage()
    with pytest.raises(ObjectNotFoundError, match=f"s3://{s3_bucket}/none.csv: no such file"):
        read_manifest(f"s3://{s3_bucket}/none.csv", tmp_path, storage)
    storage.write_bytes_atomic(f"s3://{s3_bucket}/m.csv", b"source,target\na,b\n")
    with pytest.raises(InputError, match="lacks column"):
        read_manifest(f"s3://{s3_bucket}/m.csv", tmp_path, storage)



def test_outputs_in_a_bucket(s3_server, s3_bucket, tmp_path):
    from fusion_ray.storage import Location

    storage = s3_server.storage()
    storage.write_bytes_atomic(f"s3://{s3_bucket}/m.csv", b"source,target,output\na,b,s3://x-bucket/o.mp4\na,c,d/c.mp4\n")
    root = Location.parse(f"s3://{s3_bucket}/out")
    first, second = read_manifest(f"s3://{s3_bucket}/m.csv", root, storage)
    assert first.output == Location.parse("s3://x-bucket/o.mp4") and second.output == root / "d/c.mp4"
    storage.write_bytes_atomic(f"s3://{s3_bucket}/faces/a.jpg", b"x")
    (item,) = expand_patterns(f"s3://{s3_bucket}/faces/*.jpg", f"s3://{s3_bucket}/faces/*.jpg",
                              "{source_name}/{target_name}.png", root, storage)
    assert item.output == root / "a/a.png"
    with pytest.raises(InputError, match="two items write"):
        check_unique_outputs([item, JobItem((), tmp_path / "t.png", root / "a/a.png")])


def test_patterns_in_a_bucket(s3_server, s3_bucket, tmp_path):
    from fusion_ray.storage import Location

    storage = s3_server.storage()
    for key in ("faces/a.jpg", "faces/b.jpg", "faces/notes.txt", "clips/x.mp4", "clips/sub/y.mp4", "clips/z.png"):
        storage.write_bytes_atomic(f"s3://{s3_bucket}/{key}", b"x")
    items = expand_patterns(f"s3://{s3_bucket}/faces/*.jpg", f"s3://{s3_bucket}/clips/*.mp4",
                            "{source_name}-{target_name}.{target_extension}", tmp_path, storage)
    at = Location.parse(f"s3://{s3_bucket}").joinpath
    assert items == [JobItem((at("faces/a.jpg"),), at("clips/x.mp4"), tmp_path / "a-x.mp4"),
                     JobItem((at("faces/b.jpg"),), at("clips/x.mp4"), tmp_path / "b-x.mp4")]
    deep = expand_patterns(f"s3://{s3_bucket}/faces/a.jpg", f"s3://{s3_bucket}/clips/**/*.mp4", "{index}.mp4",
                           tmp_path, storage)
    assert [i.target for i in deep] == [at("clips/sub/y.mp4"), at("clips/x.mp4")]
    with pytest.raises(InputError, match="no file matches the target pattern"):
        expand_patterns(f"s3://{s3_bucket}/faces/*.jpg", f"s3://{s3_bucket}/none/*.mp4", "{index}.mp4",
                        tmp_path, storage)
