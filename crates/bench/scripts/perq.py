#!/usr/bin/env python3
"""One request class of the workload against a running server, request by request:
each request's fastest of `--reps` (sorted, with its body), or with `--two-passes`
each request's first and second time in the file's order (the first pays what a
request builds or faults in on first use).

    crates/bench/scripts/perq.py --port 8080 --dataset /tmp/ds1m --class text --reps 5
"""

import argparse
import statistics

from common import Server, queries

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--dataset", required=True)
ap.add_argument("--class", dest="cls", required=True)
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--two-passes", action="store_true")
ap.add_argument("--count", type=int, default=100)
args = ap.parse_args()

srv = Server.attach(args.port)


reqs = queries(args.dataset, args.cls)[: args.count]
if args.two_passes:
    first = [srv.timed_post(p, b) for _, p, b in reqs]
    second = [srv.timed_post(p, b) for _, p, b in reqs]
    for a, b, (_, _, body) in sorted(zip(first, second, reqs), key=lambda r: r[1] - r[0]):
        print(f"{a:8.2f} {b:8.2f}  {body[:140]}")
    print(f"median first {statistics.median(first):.2f} ms, second {statistics.median(second):.2f} ms;"
          f" sums {sum(first):.0f} / {sum(second):.0f} ms")
else:
    best = sorted((min(srv.timed_post(p, b) for _ in range(args.reps)), b) for _, p, b in reqs)
    for ms, body in best:
        print(f"{ms:8.2f}  {body[:160]}")
    times = [ms for ms, _ in best]
    print(f"median {statistics.median(times):.2f} ms, sum {sum(times):.0f} ms (best of {args.reps})")
