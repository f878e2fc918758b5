#!/usr/bin/env python3
"""A fault soak of acas-emulator: N clients loop create, exec, write, read and delete through the
ACAS REST API while the emulator answers a share of requests 503 and drops a share of replies
after acting on them (--fault-5xx-rate, --fault-drop-rate). It checks, and prints as JSON:

- no lost data: every file read back and every exec's view of it match what was written;
- no duplicated sandbox: each iteration's labels name exactly one sandbox, even when a create's
  reply was dropped (the client lists by its labels before creating again, as a careful ACAS
  client must);
- no leaked sandbox: once the clients stop and the faults are switched off, nothing with the
  soak's label lists, and the runtime holds no sandbox directory.

The client is its own (stdlib http.client over loopback), so the figures measure the emulator,
not a retry policy under development. Exit status 0 when every check holds.

Usage: bench/emulator_soak.py --emulator build/bin/acas-emulator [--seconds 120] [--clients 4]
"""

import argparse
import hashlib
import http.client
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

GROUP = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-soak/"
         "sandboxGroups/soak")
API = "api-version=2026-02-01-preview"
TOKEN = "soak-token"
WORK = "/maf-sandbox/work"


class Dropped(Exception):
    """The reply never arrived whole: the request may or may not have been acted on."""


class Emulator:
    def __init__(self, binary, state_dir, fault_5xx, fault_drop, seed):
        self.log = open(os.path.join(state_dir, "emulator.log"), "wb")
        self.process = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--state-dir", state_dir,
             "--plain-http", "--token", TOKEN, "--fault-5xx-rate", str(fault_5xx),
             "--fault-drop-rate", str(fault_drop), "--fault-seed", str(seed)],
            stdout=subprocess.PIPE, stderr=self.log)
        line = self.process.stdout.readline().decode().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"the emulator said {line!r}; see {self.log.name}")
        url = urllib.parse.urlparse(line[len("listening on "):])
        self.host, self.port = url.hostname, url.port

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)
        self.log.close()


class Client:
    """One connection at a time, re-opened after every dropped reply."""

    def __init__(self, emulator, stats):
        self.emulator = emulator
        self.stats = stats
        self.connection = None

    def request(self, method, path, body=None, query="", content_type="application/json"):
        target = f"{GROUP}{path}?{API}" + (f"&{query}" if query else "")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        if body is not None:
            headers["Content-Type"] = content_type
        if self.connection is None:
            self.connection = http.client.HTTPConnection(self.emulator.host, self.emulator.port,
                                                         timeout=120)
        started = time.monotonic()
        try:
            self.connection.request(method, target, body=body, headers=headers)
            response = self.connection.getresponse()
            data = response.read()
        except (http.client.HTTPException, ConnectionError, OSError) as e:
            self.connection.close()
            self.connection = None
            self.stats.count("dropped")
            raise Dropped(str(e)) from e
        if response.getheader("Connection", "").lower() == "close":
            self.connection.close()
            self.connection = None
        self.stats.latency(method, path, time.monotonic() - started)
        if response.status >= 500:
            self.stats.count(f"status_{response.status}")
        return response.status, data

    # An idempotent request (GET, a whole-file PUT, a read-only exec, DELETE) is simply sent again
    # after a 5xx or a dropped reply.
    def until(self, accept, method, path, body=None, query="",
              content_type="application/json", deadline=120):
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            try:
                status, data = self.request(method, path, body, query, content_type)
            except Dropped:
                self.stats.count("retries")
                continue
            if status in accept:
                return status, data
            if status < 500:
                raise RuntimeError(f"{method} {path} answered {status}: {data[:300]!r}")
            self.stats.count("retries")
            time.sleep(0.05)
        raise RuntimeError(f"{method} {path} never succeeded")

    def by_labels(self, labels):
        selector = urllib.parse.quote(",".join(f"{k}={v}" for k, v in labels.items()))
        _, data = self.until({200}, "GET", "/sandboxes", query=f"labels={selector}")
        return [s["id"] for s in json.loads(data)["value"]]

    # A create is not idempotent: after a dropped reply the client asks the service by its
    # labels whether it was made before making another.
    def create(self, labels):
        body = json.dumps({"sourcesRef": {"diskImage": {"name": "host", "isPublic": True}},
                           "labels": labels})
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                status, data = self.request("PUT", "/sandboxes", body)
            except Dropped:
                found = self.by_labels(labels)
                if found:
                    self.stats.count("create_reply_dropped_but_made")
                    return found
                continue
            if status == 201:
                return [json.loads(data)["id"]]
            if status < 500:
                raise RuntimeError(f"create answered {status}: {data[:300]!r}")
            self.stats.count("retries")
            found = self.by_labels(labels)
            if found:  # a 5xx fault answers before acting: this would be a duplicate in waiting
                return found
        raise RuntimeError("create never succeeded")


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.latencies = {}

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def latency(self, method, path, seconds):
        parts = path.strip("/").split("/")
        op = method + " " + ("/sandboxes" if len(parts) == 1 else
                             "/sandboxes/{id}" + ("/" + "/".join(parts[2:]) if len(parts) > 2
                                                  else ""))
        with self.lock:
            self.latencies.setdefault(op, []).append(seconds)


def iteration(client, stats, run, c, i):
    labels = {"soak": run, "client": str(c), "iter": str(i)}
    ids = client.create(labels)
    if len(ids) > 1:
        stats.count("duplicate_sandboxes", len(ids) - 1)
    sandbox = ids[0]
    end = time.monotonic() + 120
    while True:
        _, data = client.until({200}, "GET", f"/sandboxes/{sandbox}")
        state = json.loads(data)["state"]
        if state == "Running":
            break
        if state != "Creating" or time.monotonic() > end:
            raise RuntimeError(f"sandbox {sandbox} is {state}")
        time.sleep(0.05)
    for round_ in range(2):  # a write, then an overwrite of the same file
        content = os.urandom(random.randint(1024, 65536)).hex().encode()
        path = f"{WORK}/soak-{c}-{i}.txt"
        client.until({200}, "PUT", f"/sandboxes/{sandbox}/files", content,
                     f"path={urllib.parse.quote(path)}&createDirs=true",
                     "application/octet-stream")
        _, data = client.until({200}, "POST", f"/sandboxes/{sandbox}/executeShellCommand",
                               json.dumps({"command": f"sha256sum {path}"}))
        seen = json.loads(data)["stdout"].split(" ")[0]
        if seen != hashlib.sha256(content).hexdigest():
            stats.count("exec_mismatches")
        _, data = client.until({200}, "GET", f"/sandboxes/{sandbox}/files",
                               query=f"path={urllib.parse.quote(path)}")
        if data != content:
            stats.count("read_mismatches")
        stats.count("bytes_verified", len(content))
    # After a dropped 202 the retry finds it Deleting (202) or gone (404): both are done.
    for extra in ids:
        client.until({202, 404}, "DELETE", f"/sandboxes/{extra}")
    stats.count("iterations")


def worker(emulator, stats, run, c, stop_at, errors):
    client = Client(emulator, stats)
    i = 0
    while time.monotonic() < stop_at:
        try:
            iteration(client, stats, run, c, i)
        except Exception as e:  # an iteration that cannot finish is a failure, counted
            errors.append(f"client {c} iteration {i}: {e}")
            stats.count("failed_iterations")
        i += 1


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--emulator", required=True)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--fault-5xx", type=float, default=0.10)
    parser.add_argument("--fault-drop", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=27)
    args = parser.parse_args()

    state_dir = tempfile.mkdtemp(prefix="maf-emu-soak-")
    emulator = Emulator(args.emulator, state_dir, args.fault_5xx, args.fault_drop, args.seed)
    stats = Stats()
    errors = []
    run = f"soak-{os.getpid()}"
    started = time.monotonic()
    threads = [threading.Thread(target=worker,
                                args=(emulator, stats, run, c, started + args.seconds, errors))
               for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started

    # Faults off, then everything of the soak must be gone (bounded wait: deletion is async).
    checker = Client(emulator, stats)
    conn = http.client.HTTPConnection(emulator.host, emulator.port, timeout=30)
    conn.request("PUT", "/admin/faults", body="{}",
                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    conn.getresponse().read()
    conn.close()
    leaked = None
    end = time.monotonic() + 60
    while time.monotonic() < end:
        leaked = checker.by_labels({"soak": run})
        sandboxes_dir = os.path.join(state_dir, "runtime", "sandboxes")
        leftovers = os.listdir(sandboxes_dir) if os.path.isdir(sandboxes_dir) else []
        if not leaked and not leftovers:
            break
        time.sleep(0.2)
    emulator.stop()

    counts = stats.counts
    report = {
        "command": " ".join(sys.argv),
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "faults": {"rate5xx": args.fault_5xx, "dropRate": args.fault_drop, "seed": args.seed},
        "iterations": counts.get("iterations", 0),
        "failed_iterations": counts.get("failed_iterations", 0),
        "requests_answered_503": counts.get("status_503", 0),
        "replies_dropped": counts.get("dropped", 0),
        "retries": counts.get("retries", 0),
        "create_reply_dropped_but_made": counts.get("create_reply_dropped_but_made", 0),
        "bytes_verified": counts.get("bytes_verified", 0),
        "read_mismatches": counts.get("read_mismatches", 0),
        "exec_mismatches": counts.get("exec_mismatches", 0),
        "duplicate_sandboxes": counts.get("duplicate_sandboxes", 0),
        "leaked_sandboxes": len(leaked or []),
        "leaked_runtime_dirs": len(leftovers),
        "latency_ms": {op: {"n": len(v), "p50": round(statistics.median(v) * 1000, 1),
                            "p95": round(percentile(v, 0.95) * 1000, 1)}
                       for op, v in sorted(stats.latencies.items())},
        "errors": errors[:10],
    }
    print(json.dumps(report, indent=2))
    ok = (report["iterations"] > 0 and not errors and report["read_mismatches"] == 0
          and report["exec_mismatches"] == 0 and report["duplicate_sandboxes"] == 0
          and report["leaked_sandboxes"] == 0 and report["leaked_runtime_dirs"] == 0)
    if ok:
        shutil.rmtree(state_dir, ignore_errors=True)
    else:
        print(f"state and log kept in {state_dir}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
