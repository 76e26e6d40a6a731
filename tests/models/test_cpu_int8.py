"""The INT8 weight width by CPU: 8-bit with VNNI (or off x86), 7-bit elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusion_ray.models.cpu_int8 import cpu_flags, describe, int8_weight_bits

XEON = frozenset({"fpu", "sse4_2", "avx2", "avx512f", "avx512bw", "avx512_vnni"})
EPYC_AVX2 = frozenset({"fpu", "sse4_2", "avx2", "fma"})
SKYLAKE_X = frozenset({"avx2", "avx512f", "avx512bw"})  # AVX-512 without VNNI saturates too
ALDER_LAKE = frozenset({"avx2", "avx_vnni"})


@pytest.mark.parametrize(("machine", "flags", "bits"), [
    ("x86_64", XEON, 8), ("x86_64", ALDER_LAKE, 8), ("x86_64", EPYC_AVX2, 7), ("x86_64", SKYLAKE_X, 7),
    ("AMD64", frozenset(), 7), ("aarch64", frozenset(), 8), ("arm64", EPYC_AVX2, 8)])
def test_auto_picks_the_width_by_instruction_set(machine: str, flags: frozenset[str], bits: int) -> None:
    assert int8_weight_bits("auto", machine=machine, flags=flags) == bits


def test_a_configured_width_wins_and_the_notice_says_why() -> None:
    assert int8_weight_bits(7, machine="x86_64", flags=XEON) == 7
    assert int8_weight_bits(8, machine="x86_64", flags=EPYC_AVX2) == 8
    assert "no VNNI" in describe(7) and "VNNI" in describe(8) and "configured" in describe(7, 7)


def test_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\n")
    assert cpu_flags(info) == frozenset({"fpu", "avx2", "fma"})
    assert cpu_flags(tmp_path / "missing") is None
