#!/usr/bin/env python3
"""The benchmark's own order, narrowed: a fresh engine, the dimensions, the bulk load
(streamed by curl), 5 s idle, the dataset's deltas back to back, then optionally the
did-you-mean class and other classes (`--classes`, text by default) over one kept-alive
connection. Prints the bulk's rate, resident memory, each delta's time to its 201, the
process's CPU over the deltas and, with `RUST_LOG=discern_engine=debug`, each delta's
snapshot preparation.

    crates/bench/scripts/after_bulk.py --binary target/release/discern --dataset /tmp/ds1m \\
        [--perf /tmp/deltas.perf] [--queries --wait 0 --passes 3 --classes text,exact]

`deltas.py` replays deltas on a copy of a data dir instead, which is quicker but not
the benchmark's state: `cp` writes the item store in large page-cache folios, and a
4 KiB write into one costs ext4 a loop over every block of the folio
(`ext4_block_write_begin` was a fifth of the store thread there, and nearly nothing
after a bulk load; DECISIONS, session 59).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import time

from common import Server, queries

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--binary", required=True)
ap.add_argument("--dataset", required=True)
ap.add_argument("--perf", help="perf record (DWARF stacks) over the deltas into this file")
ap.add_argument("--queries", action="store_true", help="then did-you-mean once and --classes --passes times")
ap.add_argument("--wait", type=float, default=0.0, help="seconds between the last 201 and the queries")
ap.add_argument("--passes", type=int, default=1, help="how many times --classes are sent (pass 1 pays first use)")
ap.add_argument("--classes", default="text", help="the classes sent --passes times after did-you-mean, comma-separated")
ap.add_argument("--perf-passes", help="perf record (DWARF stacks) each pass of --classes into this path + .N")
ap.add_argument("--work", default="/tmp/after-bulk-work")
ap.add_argument("--keep-log", help="copy the server's log here before the work dir is removed")
ap.add_argument("--port", type=int, default=18811)
args = ap.parse_args()

shutil.rmtree(args.work, ignore_errors=True)
os.makedirs(args.work)


def record(path, hz=499):
    """perf record (DWARF stacks) of the server into `path`, started and given a second to attach."""
    perf = subprocess.Popen(
        ["perf", "record", "-F", str(hz), "--call-graph", "dwarf,24000", "-p", str(srv.proc.pid), "-o", path],
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1)
    return perf


log = os.path.join(args.work, "log")
srv = Server(args.binary, os.path.join(args.work, "data"), args.port, log)
took = []  # ms to each delta's 201
try:
    srv.wait_queryable()
    srv.request("POST", "/ws/dimensions", open(os.path.join(args.dataset, "dimensions.xml"), "rb").read())
    started = time.time()
    status = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-T",
         os.path.join(args.dataset, "bulk.xml"), f"http://127.0.0.1:{args.port}/ws/changeset?type=bulk"],
        capture_output=True, text=True, check=True,
    ).stdout
    bulk_s = time.time() - started
    if status != "201":
        raise RuntimeError(f"bulk: HTTP {status}")
    rss_bulk = srv.rss_mb()
    items = int(re.search(rb'"datasetSize":\s*(\d+)', srv.request(
        "POST", "/ws/query", b'{"criteria": [], "pageSize": 0}')[1]).group(1))
    time.sleep(5)  # as the benchmark waits before its deltas
    rss_idle = srv.rss_mb()

    perf = None
    if args.perf:
        perf = record(args.perf)
    items_file = os.path.join(args.work, "data", "items.redb")
    ticks, written, grown = srv.cpu_ticks(), srv.written_bytes(), os.path.getsize(items_file)
    k = 1
    while os.path.exists(os.path.join(args.dataset, f"delta-{k}.xml")):
        body = open(os.path.join(args.dataset, f"delta-{k}.xml"), "rb").read()
        t = time.time()
        status, _ = srv.request("POST", "/ws/changeset", body)
        took.append((time.time() - t) * 1e3)
        if status != 201:
            raise RuntimeError(f"delta-{k}.xml: HTTP {status}")
        k += 1
    ticks, written = srv.cpu_ticks() - ticks, srv.written_bytes() - written
    grown = os.path.getsize(items_file) - grown
    if perf:
        perf.send_signal(2)
        perf.wait()
    print(
        f"{os.path.basename(args.binary)}: bulk {items / bulk_s:,.0f} items/s; deltas median"
        f" {statistics.median(took):.1f} ms, CPU {ticks} ticks; each {' '.join(f'{ms:.0f}' for ms in took)}",
        flush=True,
    )
    print(f"  written by the deltas: {written / 1e6:.1f} MB (write calls, page cache included);"
          f" the item store's file grew {grown / 1e6:.1f} MB", flush=True)
    print(f"  resident: {rss_bulk} MB at the bulk's 201, {rss_idle} 5 s later, {srv.rss_mb()} after the deltas", flush=True)

    if args.queries:
        time.sleep(args.wait)
        for n, cls in enumerate(["didyoumean"] + args.classes.split(",") * args.passes):
            reqs = queries(args.dataset, cls)[:100]
            perf = record(f"{args.perf_passes}.{n}", 1999) if args.perf_passes and n > 0 else None
            times = [srv.timed_post(p, b) for _, p, b in reqs]
            if perf:
                perf.send_signal(2)
                perf.wait()
            print(f"  {cls} p50 {statistics.median(times):.2f} ms, sum {sum(times):.0f} ms", flush=True)
        print(f"  resident after the queries: {srv.rss_mb()} MB", flush=True)
finally:
    srv.stop()
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(log, errors="replace").read())
    prepared = [int(us) for us in re.findall(r"snapshot prepared us=(\d+)", text)]
    if prepared and took:
        last = prepared[-len(took) :]
        print("  snapshot prepared (ms):", " ".join(f"{us / 1000:.0f}" for us in last))
    if args.keep_log:
        shutil.copy(log, args.keep_log)
    shutil.rmtree(args.work, ignore_errors=True)
