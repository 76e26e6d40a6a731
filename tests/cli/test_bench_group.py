"""``fusion-ray bench NAME``: the benchmarks under one command; the old top-level names still work
for a release, each with a one-line notice naming the new spelling."""

import argparse

import pytest

from fusion_ray.cli import build_parser, main
from fusion_ray.cli.bench_group import OLD_BENCH, OLD_NAMES, translate


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    return list(_subparsers(parser))


def test_the_top_level_has_the_user_commands_and_bench():
    assert _choices(build_parser()) == ["swap", "job", "live", "serve", "detect", "models", "bench"]


def test_every_old_name_has_a_benchmark_under_bench():
    names = _choices(_subparsers(build_parser())["bench"])
    assert set(OLD_NAMES.values()) | {OLD_BENCH} == set(names)
    assert len(names) == len(OLD_NAMES) + 1


@pytest.mark.parametrize(("argv", "expected"), [
    (["bench-scale", "--counts", "1"], ["bench", "scale", "--counts", "1"]),
    (["-v", "live-bench", "--streams", "1"], ["-v", "bench", "live", "--streams", "1"]),
    (["serve-load", "--requests", "2"], ["bench", "serve", "--requests", "2"]),
    (["bench", "--frames", "4"], ["bench", "pipeline", "--frames", "4"]),
    (["bench"], ["bench", "pipeline"]),  # bare `bench` ran the pipeline benchmark with its defaults
])
def test_an_old_spelling_is_translated_with_a_notice(argv, expected):
    words, notice = translate(argv)
    assert words == expected
    old = next(w for w in argv if not w.startswith("-"))
    assert notice is not None and "\n" not in notice
    new = expected[expected.index("bench"):][:2]
    assert f"`fusion-ray {old}`" in notice and f"`fusion-ray {' '.join(new)}`" in notice


@pytest.mark.parametrize("argv", [["bench", "scale", "--counts", "1"], ["bench", "--help"],
                                  ["swap", "--source", "bench-scale"], ["--version"], []])
def test_new_spellings_and_other_commands_are_left_alone(argv):
    assert translate(argv) == (argv, None)


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_each_old_name_still_runs_its_benchmark_help(old, capsys):
    with pytest.raises(SystemExit) as done:
        main([old, "--help"])
    assert done.value.code == 0
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [translate([old])[1]]
    assert f"usage: fusion-ray bench {OLD_NAMES[old]} " in captured.out


def test_the_old_and_the_new_name_run_the_same_benchmark(capsys):
    assert main(["bench-webrtc", "--streams", "0"]) == 2  # refused before anything starts
    err = capsys.readouterr().err
    assert err.startswith("note: `fusion-ray bench-webrtc` is now `fusion-ray bench webrtc`")
    assert main(["bench", "webrtc", "--streams", "0"]) == 2
    again = capsys.readouterr().err
    assert "note:" not in again and again.strip() == err.strip().splitlines()[-1]


def test_bench_help_lists_the_names(capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", "--help"])
    assert done.value.code == 0
    assert "NAME" in capsys.readouterr().out
