"""Which CPU a benchmark ran on: its model and the instruction sets onnxruntime's int4
kernels choose by (issue #23: the same build took other kernels, and rounded
differently, on an AVX2 machine than on the AVX-512 ones its figures came from).

Read from ``/proc/cpuinfo`` on Linux; elsewhere only ``platform.processor()``.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Literal

import msgspec

# x86: what MLAS dispatches on; ARM64 (``Features``): NEON, dot product, int8 matmul, SVE.
X86_FLAGS = ("avx2", "avx_vnni", "avx512f")
X86_PREFIXES = ("avx512", "amx")
ARM_FLAGS = ("asimd", "asimddp", "i8mm", "sve", "sve2", "bf16")


class Cpu(msgspec.Struct, frozen=True):
    model: str
    flags: list[str]  # those of X86_FLAGS/X86_PREFIXES or ARM_FLAGS the CPU has, in /proc/cpuinfo's order
    kind: Literal["x86", "arm", "unread"] = "x86"  # unread: no /proc/cpuinfo (not Linux)

    def describe(self) -> str:
        """``AMD EPYC 7B13 (avx2; no avx512, avx_vnni, amx)``: what it has and, on x86,
        which of the families that change the kernels it lacks."""
        model = self.model or "unknown CPU"
        if self.kind == "unread":
            return f"{model} (instruction-set flags not read on this platform)"
        have = ", ".join(self.flags) or "none of them"
        if self.kind == "arm":
            return f"{model} ({have})"
        missing = [family for family in ("avx2", "avx512", "avx_vnni", "amx") if not any(f.startswith(family) for f in self.flags)]
        return f"{model} ({have}" + (f"; no {', '.join(missing)}" if missing else "") + ")"


def parse_cpuinfo(text: str) -> Cpu:
    """The first processor's model and the flags that matter, from ``/proc/cpuinfo``'s text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # one processor is enough: they are alike
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or fields.get("Model") or fields.get("Hardware") or ""
    if "flags" in fields:
        flags = [f for f in fields["flags"].split() if f in X86_FLAGS or f.startswith(X86_PREFIXES)]
    else:
        flags = [f for f in fields.get("Features", "").split() if f in ARM_FLAGS]
        if not model and "CPU implementer" in fields:  # ARM kernels name no model
            model = f"ARM implementer {fields['CPU implementer']} part {fields.get('CPU part', '?')}"
        return Cpu(model=model, flags=flags, kind="arm")
    return Cpu(model=model, flags=flags)


def this_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> Cpu:
    try:
        return parse_cpuinfo(cpuinfo.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return Cpu(model=platform.processor() or platform.machine(), flags=[], kind="unread")
