#!/usr/bin/env python3
"""What a page the process has never touched costs on this machine, against one it freed
a moment ago. On this project's VMs (Firecracker, the guest's free memory reported to
the host: `page_reporting.page_reporting_order=11` on the kernel's command line) memory
the guest has had free for a few seconds is handed back to the host, and the first touch
of it costs the host's fault as well as the guest's zeroing: ~4 ms a 2 MiB huge page
against ~0.2 ms for memory freed and taken again at once (DECISIONS, session 60). Every
allocation that grows a process's resident memory pays it.

    crates/bench/scripts/fresh_pages.py [--mb 256] [--wait 4]

Each round maps `--mb` MiB of anonymous memory, asks for huge pages, writes every byte
of it (one `memset`: its own cost is ~0.1 ms a 2 MiB page, the rest is faults) and
unmaps it; the round after `--wait` seconds idle meets memory the host took back.
"""

import argparse
import ctypes
import mmap
import time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--mb", type=int, default=256)
ap.add_argument("--wait", type=float, default=4.0, help="seconds idle before the last round")
args = ap.parse_args()

HUGE = 2 << 20
size = args.mb << 20


def touch_round():
    """Milliseconds of first touches per 2 MiB of a fresh mapping."""
    m = mmap.mmap(-1, size + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = (ctypes.c_char * (size + HUGE)).from_buffer(m)
    # the 2 MiB-aligned part: only there can the kernel fault in huge pages
    skip = -ctypes.addressof(whole) % HUGE
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE, skip, size)
    started = time.perf_counter()
    ctypes.memset(ctypes.addressof(whole) + skip, 1, size)
    took = time.perf_counter() - started
    del whole
    m.close()
    return took * 1e3 / (size / HUGE)


rounds = [("first", touch_round()), ("again at once", touch_round()), ("again at once", touch_round())]
time.sleep(args.wait)
rounds.append((f"after {args.wait:g} s idle", touch_round()))
for name, ms in rounds:
    print(f"{name:>16}: {ms:.2f} ms per 2 MiB")
