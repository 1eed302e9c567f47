#!/usr/bin/env python3
"""Resident memory and heap by phase on a fresh engine, the benchmark's phases in its
order: dimensions, bulk load, 5 s, ten deltas back to back, the workload's requests
(at most 100 per class), an export, then 5 and 10 s idle. Per request class: the p50,
and how many requests the kernel had to fault a fresh huge page for (on this project's
VMs a 2 MiB page faulted in costs milliseconds: DECISIONS, session 52).

    crates/bench/scripts/memphase.py --binary target/release/discern --dataset /tmp/ds1m
"""

import argparse
import os
import shutil
import statistics
import time

from common import Server, queries, thp_faults

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--binary", required=True)
ap.add_argument("--dataset", required=True, help="a gen_dataset.py directory")
ap.add_argument("--work", default="/tmp/memphase", help="emptied and used for the data dir")
ap.add_argument("--port", type=int, default=18801)
ap.add_argument("--hold", type=int, default=0, help="seconds to keep the server after the last phase")
args = ap.parse_args()

shutil.rmtree(args.work, ignore_errors=True)
os.makedirs(args.work)
srv = Server(args.binary, os.path.join(args.work, "data"), args.port, os.path.join(args.work, "log"))
srv.wait_queryable()


def phase(label):
    print(f"{label:24s} rss {srv.rss_mb():5d} MB  heap {srv.heap_mb():5d} MB  huge pages {srv.huge_mb():4d} MB", flush=True)


try:
    srv.request("POST", "/ws/dimensions", open(os.path.join(args.dataset, "dimensions.xml"), "rb").read())
    t = time.time()
    with open(os.path.join(args.dataset, "bulk.xml"), "rb") as f:
        status, _ = srv.request("POST", "/ws/changeset?type=bulk", f)
    print(f"bulk: {status} in {time.time() - t:.1f} s", flush=True)
    phase("after the bulk")
    time.sleep(5)
    phase("5 s after the bulk")
    took = []
    for i in range(1, 11):
        body = open(os.path.join(args.dataset, f"delta-{i}.xml"), "rb").read()
        t = time.time()
        srv.request("POST", "/ws/changeset", body)
        took.append((time.time() - t) * 1e3)
    print(f"deltas: median {statistics.median(took):.1f} ms", flush=True)
    phase("after the deltas")
    per_class = {}
    for cls, path, body in queries(args.dataset):
        seen = per_class.setdefault(cls, [])
        if len(seen) >= 100:
            continue
        faults = thp_faults()
        t = time.perf_counter()
        srv.request("POST", path, body)
        seen.append(((time.perf_counter() - t) * 1e3, thp_faults() - faults))
    phase("after the requests")
    for cls, seen in per_class.items():
        clean = [ms for ms, f in seen if f == 0]
        faulted = [ms for ms, f in seen if f > 0]
        print(
            f"  {cls:10s} p50 {statistics.median(ms for ms, _ in seen):6.2f} ms;"
            f" without faults {statistics.median(clean) if clean else 0:6.2f} ({len(clean)}),"
            f" with {statistics.median(faulted) if faulted else 0:6.2f} ({len(faulted)})",
            flush=True,
        )
    t = time.time()
    srv.request("GET", "/ws/export")
    print(f"export: {time.time() - t:.1f} s", flush=True)
    phase("after the export")
    for waited in (5, 10):
        time.sleep(5)
        phase(f"{waited} s later")
    time.sleep(args.hold)
finally:
    srv.stop()
