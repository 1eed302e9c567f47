#!/usr/bin/env python3
"""The benchmark for two or more builds, alternated round by round (this machine's speed
drifts by tens of percent over minutes: DECISIONS, sessions 37 and 52), each run's
lines kept in `--logs`, then each figure per build side by side.

    crates/bench/scripts/alternate.py --dataset /tmp/ds1m --rounds 2 \\
        base=/tmp/discern.base,/tmp/discern-bench.base new=target/release/discern,target/release/discern-bench

A build is NAME=ENGINE,BENCH: the bench binary replays in process with the engine code
compiled into it, so each build needs its own.
"""

import argparse
import os
import re
import shutil
import subprocess

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--dataset", required=True)
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--logs", default="/tmp/alternate")
ap.add_argument("builds", nargs="+", help="NAME=ENGINE,BENCH")
args = ap.parse_args()

builds = []
for b in args.builds:
    name, _, paths = b.partition("=")
    engine, _, bench = paths.partition(",")
    if not (name and engine and bench):
        ap.error(f"{b}: expected NAME=ENGINE,BENCH")
    builds.append((name, os.path.abspath(engine), os.path.abspath(bench)))
os.makedirs(args.logs, exist_ok=True)

FIGURE = re.compile(
    r"(.*?)\s+(p50 \S+ / p99 \S+ ms|[\d.,]+ (?:items/s|ms|s|MB)(?: \([^)]*\))?|not answered)$"
)
figures = {}  # label -> {name: [value, ...]}
for r in range(args.rounds):
    order = builds if r % 2 == 0 else builds[::-1]
    for name, engine, bench in order:
        work = os.path.join(args.logs, f"work.{name}")
        shutil.rmtree(work, ignore_errors=True)
        log = os.path.join(args.logs, f"{name}.{r + 1}.log")
        with open(log, "w") as out:
            subprocess.run([bench, "--dataset", args.dataset, "--binary", engine, "--work", work],
                           stdout=out, stderr=subprocess.STDOUT, check=False)
        shutil.rmtree(work, ignore_errors=True)
        for line in open(log):
            # "label value   target ..." as the benchmark prints each figure (`row`)
            left, sep, _ = line.rstrip().partition("   target")
            m = FIGURE.match(left.strip())
            if sep and m:
                figures.setdefault(m.group(1).strip(), {}).setdefault(name, []).append(m.group(2).strip())
        print(f"round {r + 1}: {name} done ({log})", flush=True)

names = [n for n, _, _ in builds]
print("| figure | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(names))
for label, per in figures.items():
    print(f"| {label} | " + " | ".join(" / ".join(per.get(n, [])) for n in names) + " |")
