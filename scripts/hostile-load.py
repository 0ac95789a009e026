#!/usr/bin/env python3
"""Measure what hostile requests cost everyone else: a load test, not a timed test.

Starts `wasched serve` on a free loopback port with a fresh data dir, creates NODES nodes, then
creates PODS ordinary pods in batches from one thread while, from other threads, it sends the
hostile requests of issue 17: a pod with 60,000 node-affinity expressions (3.4 MB), and four YAML
documents of 100,000 nested `[`. A fourth thread asks `/healthz` every 10 ms. It prints how each
hostile request was answered, pods placed per second, the longest `/healthz` answer, the server's
peak RSS, and whether every ordinary pod was placed.

    scripts/hostile-load.py [--binary target/release/wasched] [--nodes 5000] [--pods 10000]

Run it with the binary of two commits, one after the other, to compare (all traffic stays on
127.0.0.1).
"""

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def request(url, method="GET", body=None, content_type="application/json", timeout=300):
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def node(i):
    return {"kind": "Node", "metadata": {"name": f"n{i}", "labels": {"zone": f"z{i % 3}"}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}


def pod(i):
    return {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "load"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def hostile_pod():
    expressions = [{"key": f"k{i}", "operator": "In", "values": ["v"]} for i in range(60_000)]
    return {"kind": "Pod", "metadata": {"name": "hostile", "namespace": "load"},
            "spec": {"containers": [{"name": "c"}],
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}}}


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=os.path.join(ROOT, "target/release/wasched"))
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="wasched-hostile-")
    server = subprocess.Popen(
        [args.binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", data_dir],
        stdout=subprocess.PIPE, stderr=open(os.path.join(data_dir, "log.txt"), "w"), text=True)
    try:
        url = server.stdout.readline().strip().removeprefix("wasched listening on ")
        for start in range(0, args.nodes, 500):
            items = [node(i) for i in range(start, min(args.nodes, start + 500))]
            status, body = request(f"{url}/v1/objects", "POST", {"kind": "List", "items": items})
            assert status == 200, body
        rss_before = rss_mb(server.pid)

        health = {"longest": 0.0, "stop": False}

        def probe():
            while not health["stop"]:
                started = time.monotonic()
                request(f"{url}/healthz", timeout=120)
                health["longest"] = max(health["longest"], time.monotonic() - started)
                time.sleep(0.01)

        answers = {}

        def send(label, body, content_type):
            started = time.monotonic()
            status, text = request(f"{url}/v1/objects", "POST", body, content_type)
            answers[label] = (status, time.monotonic() - started, text[:160].decode(errors="replace"))

        hostile = [threading.Thread(target=send, args=("hostile pod (3.4 MB)", hostile_pod(), "application/json"))]
        nested = ("kind: Pod\nmetadata: {name: nested}\nx: " + "[" * 100_000).encode()
        hostile += [threading.Thread(target=send, args=(f"nested YAML #{k}", nested, "application/yaml"))
                    for k in range(4)]
        prober = threading.Thread(target=probe)
        prober.start()

        started = time.monotonic()
        for start in range(0, args.pods, args.batch):
            if start == args.pods // 10:
                for thread in hostile:
                    thread.start()
            items = [pod(i) for i in range(start, min(args.pods, start + args.batch))]
            status, body = request(f"{url}/v1/objects", "POST", {"kind": "List", "items": items})
            assert status == 200, body
        for thread in hostile:
            thread.join()
        placed = 0
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            _, body = request(f"{url}/v1/namespaces/load/pods")
            items = json.loads(body)["items"]
            placed = sum(1 for p in items if p.get("spec", {}).get("nodeName") and p["metadata"]["name"].startswith("p"))
            if placed >= args.pods:
                break
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        health["stop"] = True
        prober.join()

        for label, (status, seconds, text) in sorted(answers.items()):
            print(f"{label}: HTTP {status} in {seconds * 1000:.0f} ms: {text}")
        print(f"ordinary pods placed: {placed} of {args.pods} in {elapsed:.1f} s "
              f"({placed / elapsed:.0f} pods/s, creation included)")
        print(f"longest /healthz answer: {health['longest'] * 1000:.0f} ms")
        print(f"server peak RSS: {rss_mb(server.pid):.0f} MB (after the nodes: {rss_before:.0f} MB)")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
