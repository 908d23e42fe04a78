"""The CPU a benchmark ran on (``bench/cpu_info.py``): its model and the instruction sets
the int4 kernels choose by, read from ``/proc/cpuinfo`` as Linux writes it on an AVX2
machine, an AVX-512 + AMX one and an ARM64 one, and from this machine's own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import cpu_info  # noqa: E402
import onnx_speed_report  # noqa: E402

EPYC = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni
bugs\t\t: sysret_ss_attrs

processor\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme sse sse2 avx avx2
"""

SAPPHIRE_RAPIDS = """\
processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse2 avx avx2 avx_vnni avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 amx_bf16 avx512_fp16 amx_tile amx_int8
"""

GRAVITON = """\
processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU part\t: 0xd40
"""


@pytest.mark.parametrize(
    ("text", "model", "flags", "described"),
    [
        (EPYC, "AMD EPYC 7B13", ["avx2"], "AMD EPYC 7B13 (avx2; no avx512, avx_vnni, amx)"),
        (
            SAPPHIRE_RAPIDS,
            "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
            ["avx2", "avx_vnni", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_bf16",
             "avx512_fp16", "amx_tile", "amx_int8"],
            "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (avx2, avx_vnni, avx512f, avx512dq, avx512bw, avx512vl, "
            "avx512_vnni, avx512_bf16, amx_bf16, avx512_fp16, amx_tile, amx_int8)",
        ),
        (GRAVITON, "ARM implementer 0x41 part 0xd40", ["asimd", "asimddp", "sve", "i8mm", "bf16"],
         "ARM implementer 0x41 part 0xd40 (asimd, asimddp, sve, i8mm, bf16)"),
    ],
)  # fmt: skip
def test_the_model_and_the_kernel_flags_are_read(text: str, model: str, flags: list[str], described: str) -> None:
    cpu = cpu_info.parse_cpuinfo(text)
    assert (cpu.model, cpu.flags) == (model, flags)
    assert cpu.describe() == described


def test_without_proc_cpuinfo_the_flags_are_said_to_be_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # platform.processor() runs `uname -p` on Linux; elsewhere it reads the registry
    monkeypatch.setattr(cpu_info.platform, "processor", lambda: "Some CPU")
    cpu = cpu_info.this_cpu(tmp_path / "no-cpuinfo")
    assert cpu.kind == "unread" and cpu.flags == [] and cpu.model == "Some CPU"
    assert cpu.describe().endswith("(instruction-set flags not read on this platform)")


def test_this_machines_cpu_is_read() -> None:
    if not Path("/proc/cpuinfo").is_file():
        pytest.skip("no /proc/cpuinfo: not Linux")
    cpu = cpu_info.this_cpu()
    assert cpu.model and cpu.kind in ("x86", "arm")


def test_results_say_their_cpu_or_that_it_was_not_recorded() -> None:
    """The docs table's header line: a run's CPU, or, for results from before runs
    recorded it, no guess."""
    recorded = {"cpu": {"model": "AMD EPYC 7B13", "flags": ["avx2"], "kind": "x86"}}
    assert onnx_speed_report.cpu_text(recorded) == "CPU AMD EPYC 7B13 (avx2; no avx512, avx_vnni, amx)"
    assert onnx_speed_report.cpu_text({}) == "CPU not recorded"
