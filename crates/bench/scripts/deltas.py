#!/usr/bin/env python3
"""Deltas on a restarted copy of a data dir: the time to each 201, the process's CPU
ticks, minor faults, huge pages faulted in (machine-wide) and resident memory over the
run. Deltas back to back (`--gap 0`, as the benchmark posts them) are bound by their
total CPU on two cores; spaced ones by each delta's own path.

    crates/bench/scripts/deltas.py --binary target/release/discern \\
        --data /tmp/bench-work/data --deltas /tmp/ds1m_d40 --first 11 --count 10 --gap 0

`--data` is copied (and synced) first, so it is left as it was; use a data dir the
generator's first deltas were applied to and a `--deltas` directory of a longer run
with the same seed (`gen_dataset.py --deltas 40 --formats deltas`), so that each delta
changes items for the first time. The copy is not the benchmark's state: `cp` leaves
the item store in large page-cache folios, which make the store's 4 KiB writes dearer
(`after_bulk.py` replays the benchmark's own order). With `KEEP_WORK=1` in the
environment the work dir (and the server's log, e.g. with
`RUST_LOG=discern_engine=debug`) is left in place.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import time

from common import Server, thp_faults

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--binary", required=True)
ap.add_argument("--data", required=True, help="a data dir to copy")
ap.add_argument("--deltas", required=True, help="a directory of delta-N.xml files")
ap.add_argument("--first", type=int, default=11)
ap.add_argument("--count", type=int, default=10)
ap.add_argument("--gap", type=float, default=0.0, help="seconds between a 201 and the next delta")
ap.add_argument("--settle", type=float, default=8.0, help="seconds idle after start-up")
ap.add_argument("--work", default="/tmp/deltas-work")
ap.add_argument("--port", type=int, default=18810)
args = ap.parse_args()

shutil.rmtree(args.work, ignore_errors=True)
os.makedirs(args.work)
data = os.path.join(args.work, "data")
subprocess.run(["cp", "-a", args.data, data], check=True)
subprocess.run(["sync"], check=True)
srv = Server(args.binary, data, args.port, os.path.join(args.work, "log"))
try:
    srv.wait_queryable()
    time.sleep(args.settle)
    ticks, faults, huge, rss = srv.cpu_ticks(), srv.minor_faults(), thp_faults(), srv.rss_mb()
    took = []
    for i in range(args.first, args.first + args.count):
        body = open(os.path.join(args.deltas, f"delta-{i}.xml"), "rb").read()
        t = time.time()
        status, _ = srv.request("POST", "/ws/changeset", body)
        took.append((time.time() - t) * 1e3)
        if status != 201:
            raise RuntimeError(f"delta-{i}.xml: {status}")
        time.sleep(args.gap)
    time.sleep(1.5)  # the last delta's background work
    print(
        f"{os.path.basename(args.binary)} gap {args.gap:g} s: median {statistics.median(took):.1f} ms,"
        f" CPU {srv.cpu_ticks() - ticks} ticks, minor faults {srv.minor_faults() - faults},"
        f" huge pages faulted {thp_faults() - huge}, rss {rss} -> {srv.rss_mb()} MB;"
        f" each {' '.join(f'{ms:.0f}' for ms in took)}",
        flush=True,
    )
finally:
    srv.stop()
    if not os.environ.get("KEEP_WORK"):
        shutil.rmtree(args.work, ignore_errors=True)
