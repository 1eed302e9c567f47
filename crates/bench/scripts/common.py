"""Helpers shared by the measurement scripts: a server started on a data dir, requests
over one kept-alive connection, and the process's and machine's counters."""

import http.client
import json
import os
import re
import subprocess
import time


class Server:
    """`discern serve` on `data_dir`, listening on 127.0.0.1:`port`."""

    def __init__(self, binary, data_dir, port, log_path, env=None):
        self.port = port
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}"],
            stdout=open(log_path, "w"),
            stderr=subprocess.STDOUT,
            env=dict(os.environ, **(env or {})),
        )
        self.conn = None

    @classmethod
    def attach(cls, port):
        """A client of a server already running on 127.0.0.1:`port` (no process)."""
        srv = cls.__new__(cls)
        srv.port, srv.proc, srv.conn = port, None, None
        return srv

    def wait_queryable(self, timeout=600):
        """Waits until /ws/queryable answers 2xx (the index is built or loaded)."""
        end = time.time() + timeout
        while time.time() < end:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/ws/queryable")
                r = c.getresponse()
                r.read()
                if 200 <= r.status < 300:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the server did not become queryable")

    def request(self, method, path, body=None):
        """(status, body bytes) over one kept-alive connection."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        self.conn.request(method, path, body=body)
        r = self.conn.getresponse()
        return r.status, r.read()

    def timed_post(self, path, body):
        """Milliseconds to POST `body` to `path` and read the answer, which must be a 200."""
        t = time.perf_counter()
        status, _ = self.request("POST", path, body)
        if status != 200:
            raise RuntimeError(f"{status} for {body}")
        return (time.perf_counter() - t) * 1e3

    def stop(self):
        """SIGKILL: no index save at exit, so the next measurement starts at once."""
        self.proc.kill()
        self.proc.wait()

    def cpu_ticks(self):
        fields = open(f"/proc/{self.proc.pid}/stat").read().split(") ")[1].split()
        return int(fields[11]) + int(fields[12])

    def written_bytes(self):
        """Bytes the process has passed to write calls (`wchar`: the page cache's too)."""
        io = open(f"/proc/{self.proc.pid}/io").read()
        return int(re.search(r"wchar:\s+(\d+)", io).group(1))

    def minor_faults(self):
        return int(open(f"/proc/{self.proc.pid}/stat").read().split(") ")[1].split()[7])

    def rss_mb(self):
        status = open(f"/proc/{self.proc.pid}/status").read()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024

    def huge_mb(self):
        rollup = open(f"/proc/{self.proc.pid}/smaps_rollup").read()
        return int(re.search(r"AnonHugePages:\s+(\d+)", rollup).group(1)) // 1024

    def heap_mb(self):
        """Bytes in use through the global allocator, from /ws/metrics."""
        _, text = self.request("GET", "/ws/metrics")
        m = re.search(rb'vm_memory_bytes_used\{area="heap"\} (\S+)', text)
        return int(float(m.group(1))) >> 20 if m else -1


def thp_faults():
    """Transparent huge pages the kernel has faulted in, machine-wide (/proc/vmstat)."""
    return int(re.search(r"thp_fault_alloc (\d+)", open("/proc/vmstat").read()).group(1))


def queries(dataset, cls=None):
    """The workload's requests, as (class, path, body), in the file's order."""
    out = []
    for line in open(os.path.join(dataset, "queries.jsonl")):
        q = json.loads(line)
        c = q["_class"]
        if cls is not None and c != cls:
            continue
        if c == "didyoumean":
            out.append((c, "/ws/didyoumean/" + q["dimension"], json.dumps(q)))
        else:
            body = {k: v for k, v in q.items() if not k.startswith("_")}
            out.append((c, "/ws/query", json.dumps(body)))
    return out
