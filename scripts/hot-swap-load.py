#!/usr/bin/env python3
"""Measure a plugin hot swap under load on a running-size cluster.

Starts `wasched serve` on a free port with a fresh data dir, loads version one of the
PoolPreference test plugin (built by the host's build.rs), puts a profile using it with the default
plugins, creates NODES nodes (half `pool=blue`, half `pool=green`) and then pods in batches from
one client thread while the scheduler runs; after a third of the pods it uploads version two. It
prints pods/s, the upload-to-swap time, the scheduling thread's pause for the swap, the longest
gap between two bindings seen on the watch around the swap, failed cycles, and checks that no pod
was lost or bound twice and that bindings switch pool exactly once.

    scripts/hot-swap-load.py [--nodes 5000] [--pods 20000] [--batch 100]
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def request(url, method="GET", body=None, content_type="application/json"):
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", content_type)
    with urllib.request.urlopen(req, timeout=300) as response:
        return response.status, response.read()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()

    fixtures = glob.glob(os.path.join(ROOT, "target/release/build/wasched-*/out/hostile"))
    fixtures = [f for f in fixtures if os.path.exists(os.path.join(f, "wasched_fixture_pool_preference_green.wasm"))]
    if not fixtures:
        sys.exit("build first: cargo build --release")
    v1 = open(os.path.join(fixtures[0], "wasched_fixture_pool_preference.wasm"), "rb").read()
    v2 = open(os.path.join(fixtures[0], "wasched_fixture_pool_preference_green.wasm"), "rb").read()

    data_dir = tempfile.mkdtemp(prefix="wasched-hot-swap-")
    server = subprocess.Popen(
        [os.path.join(ROOT, "target/release/wasched"), "serve", "--listen", "127.0.0.1:0",
         "--data-dir", data_dir, "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=open(os.path.join(data_dir, "log.json"), "w"), text=True)
    try:
        url = server.stdout.readline().strip().removeprefix("wasched listening on ")
        while True:
            try:
                if request(url + "/readyz")[0] == 200:
                    break
            except Exception:
                time.sleep(0.05)
        request(url + "/admin/plugins/PoolPreference", "PUT", v1, "application/wasm")
        config = ('[[profiles]]\nscheduler_name = "default-scheduler"\n'
                  'scores = [{ plugin = "PoolPreference", weight = 100 }, '
                  '{ plugin = "NodeResourcesFit", weight = 1 }, '
                  '{ plugin = "NodeResourcesBalancedAllocation", weight = 1 }]\n')
        request(url + "/admin/config", "PUT", config.encode(), "application/toml")
        pool = {}
        nodes = []
        for i in range(args.nodes):
            name = f"node-{i:05}"
            pool[name] = "blue" if i % 2 == 0 else "green"
            nodes.append({"kind": "Node", "metadata": {"name": name, "labels": {
                "pool": pool[name], "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"}}})
        request(url + "/v1/objects", "POST", {"kind": "List", "items": nodes})
        _, listing = request(url + "/v1/pods")
        since = json.loads(listing)["metadata"]["resourceVersion"]

        events = []  # (arrival time, event)
        def watch():
            with urllib.request.urlopen(f"{url}/v1/watch?resourceVersion={since}", timeout=600) as stream:
                for raw in stream:
                    line = raw.decode().strip()
                    if line.startswith("data: "):
                        events.append((time.monotonic(), json.loads(line[6:])))
                        if len(events) >= args.pods:
                            return
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

        swap = {}
        def upload_v2():
            swap["requested"] = time.monotonic()
            request(url + "/admin/plugins/PoolPreference", "PUT", v2, "application/wasm")
            swap["answered"] = time.monotonic()
        uploader = threading.Thread(target=upload_v2)
        def create():
            # The upload runs beside the creating client, which does not pause for it.
            for start in range(0, args.pods, args.batch):
                if start >= args.pods // 3 and not uploader.is_alive() and "requested" not in swap:
                    uploader.start()
                items = [{"kind": "Pod", "metadata": {"name": f"p{i:06}", "namespace": "load"},
                          "spec": {"containers": [{"name": "c", "resources": {"requests": {
                              "cpu": "10m", "memory": "16Mi"}}}]}}
                         for i in range(start, min(start + args.batch, args.pods))]
                status, _ = request(url + "/v1/objects", "POST", {"kind": "List", "items": items})
                assert status == 200, status
        started = time.monotonic()
        create()
        uploader.join()
        watcher.join(timeout=600)
        elapsed = events[-1][0] - started

        bindings = {}
        pools = []
        for _, e in events:
            assert e["type"] == "Scheduled", e
            bindings[e["pod"]] = bindings.get(e["pod"], 0) + 1
            pools.append(pool[e["node"]])
        switch = pools.index("green")
        assert all(p == "green" for p in pools[switch:]), "placements switched more than once"
        assert len(bindings) == args.pods and all(n == 1 for n in bindings.values())
        _, stored = request(url + "/v1/namespaces/load/pods")
        assert len(json.loads(stored)["items"]) == args.pods

        metrics = request(url + "/metrics")[1].decode()
        def metric(series):
            for line in metrics.splitlines():
                if line.startswith(series + " "):
                    return float(line.split()[-1])
            return 0.0
        arrivals = [t for t, _ in events]
        window = [b - a for a, b in zip(arrivals, arrivals[1:])
                  if swap["requested"] - 0.5 <= a <= swap["answered"] + 0.5]
        print(f"nodes {args.nodes}, pods {args.pods} (batches of {args.batch}), {args.pods / elapsed:.0f} pods/s end to end")
        print(f"placed by v1 before the swap: {switch}; by v2 after: {args.pods - switch}")
        print(f"upload-to-swap (compile, build profiles, store, swap): {(swap['answered'] - swap['requested']) * 1000:.1f} ms")
        print(f"scheduling thread paused for swaps: {metric('wasched_hot_swap_pause_seconds_sum') * 1e6:.1f} µs over {metric('wasched_hot_swaps_total'):.0f} swaps")
        print(f"longest gap between bindings within ±0.5 s of the swap: {max(window) * 1000:.1f} ms" if window else "no bindings around the swap")
        attempts = 'scheduler_schedule_attempts_total{result="%s",profile="default-scheduler"}'
        print(f"failed cycles: {metric(attempts % 'error'):.0f}, unschedulable: {metric(attempts % 'unschedulable'):.0f}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
