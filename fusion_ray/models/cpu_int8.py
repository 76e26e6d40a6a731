"""Which INT8 weights suit this CPU: 8-bit where its dot products cannot saturate, 7-bit elsewhere.

ONNX Runtime's x86 kernels multiply unsigned 8-bit activations by signed 8-bit weights. With
VNNI (``vpdpbusd``: AVX512-VNNI, AVX-VNNI, AMX) each product is summed straight into 32 bits.
Without it (AVX2, and AVX-512 without VNNI) the kernels use ``vpmaddubsw``, which adds pairs of
products into a *saturating* 16-bit sum: 255 x 127 x 2 = 64,770 overflows 32,767, so results
depend on the CPU (measured: INT8 SCRFD recall 0.975 and landmark error 1.29% on an AVX2-only
EPYC, against 1.0 and 0.3% on a VNNI Xeon, from the same file). ONNX Runtime's documented
remedy is ``reduce_range``: 7-bit weights (-64..64), whose pairs stay within 16 bits
(255 x 64 x 2 = 32,640), so every CPU computes the same integers.

:func:`int8_weight_bits` makes the choice (``auto``: 8 on VNNI, 7 otherwise, and 7 on an x86
CPU whose flags cannot be read); it is part of the INT8 cache key, so a models folder shared by
machines of both kinds keeps one file for each. ARM's kernels widen before adding (no
saturation), so they take 8-bit weights.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Literal

WeightBits = Literal[7, 8]
WeightBitsSetting = Literal["auto", 7, 8]

VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
"""``/proc/cpuinfo`` flags of the instructions that sum u8 x s8 products into 32 bits."""

X86_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The first processor's flags from ``cpuinfo``; None where it cannot be read (not Linux)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def has_vnni(flags: frozenset[str] | None) -> bool:
    """Whether these CPU flags include a VNNI instruction set (unknown flags: no)."""
    return bool(flags and flags & VNNI_FLAGS)


def int8_weight_bits(setting: WeightBitsSetting = "auto", *, machine: str | None = None,
                     flags: frozenset[str] | None = None) -> WeightBits:
    """The weight width an INT8 build uses: the setting when it names one, else by this CPU."""
    if setting != "auto":
        return setting
    machine = (machine or platform.machine()).lower()
    if machine not in X86_MACHINES:
        return 8
    return 8 if has_vnni(flags if flags is not None else cpu_flags()) else 7


def describe(bits: WeightBits, setting: WeightBitsSetting = "auto") -> str:
    """One line for the build notice: what was chosen and why."""
    if setting != "auto":
        return f"{bits}-bit weights (as configured)"
    if bits == 8:
        return "8-bit weights (this CPU has VNNI, or is not x86)"
    return "7-bit weights (this x86 CPU has no VNNI: 8-bit products would saturate)"
