"""Every `five-actors` process keeps freed memory for reuse, so that the policy's batches stop faulting in fresh pages
(glibc's defaults map a block of over 128 KiB on its own and unmap it at free)."""

import subprocess
import sys

ALLOCATE = """
import ctypes, sys, torch
from five_actors.cli import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
kept = keep_freed_memory() if sys.argv[1] == "kept" else None
batch = torch.ones(5 << 20)  # 20 MiB, a large learner batch's share
mapped = libc.mallinfo2().hblkhd
del batch
print(kept, mapped >> 20, libc.mallinfo2().fordblks >> 20)
"""


def _allocate(arm: str) -> tuple[str, int, int]:
    out = subprocess.run([sys.executable, "-c", ALLOCATE, arm], capture_output=True, text=True, check=True).stdout
    kept, mapped_mib, free_mib = out.split()
    return kept, int(mapped_mib), int(free_mib)


def test_a_freed_batch_stays_with_the_process_for_the_next_one() -> None:
    kept, mapped, free = _allocate("kept")
    assert kept == "True"
    assert mapped < 20 and free >= 20, f"kept: {mapped} MiB mapped apart, {free} MiB free in the heap after the free"
    _, mapped, free = _allocate("default")
    assert mapped >= 20 and free < 20, f"default: {mapped} MiB mapped apart, {free} MiB free in the heap after the free"
