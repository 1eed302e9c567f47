#!/usr/bin/env python3
"""Two builds compared request by request: each runs on its own copy of a data dir, and
every request of the workload goes to both, back to back, the order alternating. Per
class: each build's p50 and the median of the paired differences (B - A), with how many
requests B answered faster. Then the copies are swapped and the run repeated: an engine's
state (which copy, how long it has run) moved a class's p50 by up to 0.1 ms in session
61, more than many changes are worth, and only the swap tells the two apart.

On this machine the paired difference resolves ~0.01 ms where whole runs vary by 10-30%:
both servers meet the same moment's noise. Requests use a connection each, as the
benchmark's do.

    crates/bench/scripts/paired.py --a /tmp/discern.base --b target/release/discern \\
        --data /tmp/after-bulk-work/data --dataset /tmp/ds1m [--class text] [--reps 3]

`--data` is copied twice (and left as it was); use a data dir a benchmark or
`after_bulk.py` run left (`--work`, `KEEP_WORK=1`).
"""

import argparse
import os
import shutil
import socket
import statistics
import time

from common import Server, queries

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--a", required=True, help="the base binary")
ap.add_argument("--b", required=True, help="the binary compared with it")
ap.add_argument("--data", required=True, help="a data dir (copied)")
ap.add_argument("--dataset", required=True, help="a gen_dataset.py directory (its queries.jsonl)")
ap.add_argument("--b-env", default="", help="B's extra environment, NAME=value,...")
ap.add_argument("--class", dest="cls", help="only this request class")
ap.add_argument("--reps", type=int, default=2, help="passes over the workload per order")
ap.add_argument("--per-class", type=int, default=100)
ap.add_argument("--work", default="/tmp/paired-work")
ap.add_argument("--ports", default="18841,18842")
args = ap.parse_args()


def close_post(port, path, body):
    """Milliseconds to POST on a new connection and read the answer to its end."""
    b = body.encode()
    t = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {len(b)}\r\n\r\n"
    s.sendall(head.encode() + b)
    first = s.recv(1 << 16)
    if not first.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"{first[:40]!r} for {body}")
    while s.recv(1 << 16):
        pass
    s.close()
    return (time.perf_counter() - t) * 1e3


work, seen = [], {}
for c, p, b in queries(args.dataset, args.cls):
    if seen.get(c, 0) < args.per_class:
        seen[c] = seen.get(c, 0) + 1
        work.append((c, p, b))

shutil.rmtree(args.work, ignore_errors=True)
copies = [os.path.join(args.work, name) for name in ("one", "two")]
for c in copies:
    shutil.copytree(args.data, c)
ports = [int(p) for p in args.ports.split(",")]
# per class: (A's times, B's times) over both orders of the copies
total = {}
try:
    for swap in (False, True):
        dirs = copies[::-1] if swap else copies
        b_env = dict(kv.split("=", 1) for kv in args.b_env.split(",") if kv)
        servers = [
            Server(binary, d, port, d + ".log", env=env)
            for binary, d, port, env in zip((args.a, args.b), dirs, ports, ({}, b_env))
        ]
        try:
            for s in servers:
                s.wait_queryable()
            time.sleep(2)
            times = {}
            i = 0
            for _ in range(args.reps):
                for c, p, b in work:
                    i += 1
                    if i % 2:
                        ta = close_post(ports[0], p, b)
                        tb = close_post(ports[1], p, b)
                    else:
                        tb = close_post(ports[1], p, b)
                        ta = close_post(ports[0], p, b)
                    times.setdefault(c, ([], []))
                    times[c][0].append(ta)
                    times[c][1].append(tb)
        finally:
            for s in servers:
                s.stop()
        print(f"A on {os.path.basename(dirs[0])}, B on {os.path.basename(dirs[1])}:", flush=True)
        for c, (a, b) in times.items():
            d = [y - x for x, y in zip(a, b)]
            print(
                f"  {c:12s} A p50 {statistics.median(a):.3f}  B p50 {statistics.median(b):.3f}"
                f"  median(B-A) {statistics.median(d):+.3f} ms  B faster in {sum(x < 0 for x in d)}/{len(d)}",
                flush=True,
            )
            ta, tb = total.setdefault(c, ([], []))
            ta.extend(a)
            tb.extend(b)
    print("both orders:")
    for c, (a, b) in total.items():
        d = [y - x for x, y in zip(a, b)]
        print(
            f"  {c:12s} median(B-A) {statistics.median(d):+.3f} ms"
            f" ({100 * statistics.median(d) / statistics.median(a):+.1f}% of A's p50)"
            f"  B faster in {sum(x < 0 for x in d)}/{len(d)}"
        )
finally:
    shutil.rmtree(args.work, ignore_errors=True)
