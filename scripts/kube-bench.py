#!/usr/bin/env python3
"""Kubernetes mode end to end: pods bound a second through an API server, and where the time goes.

Starts the API server emulator (tests/kube/apiserver.py: kmock plus resourceVersions, resumable
watches and the binding subresource), creates NODES nodes, starts `wasched serve --kubernetes`
against it (one replica, no leader election), waits until it is ready, then creates PODS pods
from CLIENTS concurrent requests and waits until every one is bound. It prints the rates of each
phase, the CPU seconds the emulator, wasched (also per pod) and this client spent, the median and
99th percentile time from a pod's creation to its binding (the emulator's clock), and wasched's own
scheduling figures from /metrics, so the limit shows: the emulator is single-threaded Python, and
its cost per request no longer grows with the objects it stores (it looks them up by key).

    target/guest-tools/python/bin/python scripts/kube-bench.py [--nodes 5000] [--pods 10000]
        [--clients 32] [--qps 50] [--burst 100] [--wasched target/release/wasched]

`--qps`/`--burst` are wasched's `--kube-api-qps`/`--kube-api-burst`; kube-scheduler's defaults
(50/100) cap bindings near 25 pods/s (a binding and a Scheduled Event per pod), so pass e.g.
`--qps 100000 --burst 1000` to measure the scheduler rather than its client limit.
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

import aiohttp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def first_line(process, prefix):
    line = process.stdout.readline().decode().strip()
    if not line.startswith(prefix):
        sys.exit(f"unexpected first line {line!r}")
    return line[len(prefix):]


def node(i):
    name = f"node-{i}"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}}


def pod(i):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i}", "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "100m",
                                                                "memory": "256Mi"}}}]}}


async def create_all(session, url, path, objects, clients):
    queue = asyncio.Queue()
    for obj in objects:
        queue.put_nowait(obj)

    async def worker():
        while not queue.empty():
            obj = queue.get_nowait()
            async with session.post(url + path, json=obj) as response:
                if response.status >= 300:
                    sys.exit(f"creating {obj['metadata']['name']}: {response.status} "
                             f"{await response.text()}")

    await asyncio.gather(*(worker() for _ in range(clients)))


async def bindings(session, url):
    async with session.get(url + "/_test/counts") as response:
        return (await response.json()).get("POST pods/binding", 0)


async def unbound(session, url):
    async with session.get(url + "/api/v1/pods") as response:
        items = (await response.json())["items"]
    return sum(1 for p in items if not p.get("spec", {}).get("nodeName"))


def metric_sums(text):
    figures = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        if name.startswith(("scheduler_scheduling_attempt_duration_seconds_sum",
                            "scheduler_scheduling_attempt_duration_seconds_count",
                            "scheduler_schedule_attempts_total",
                            "wasched_status_writes_total",
                            "wasched_api_write_failures_total",
                            "wasched_kube_lists_total")):
            figures[name] = figures.get(name, 0.0) + float(value)
    return figures


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--qps", default="50")
    parser.add_argument("--burst", default="100")
    parser.add_argument("--wasched", default=os.path.join(ROOT, "target/release/wasched"))
    args = parser.parse_args()

    api = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests/kube/apiserver.py")],
                           stdout=subprocess.PIPE)
    url = first_line(api, "listening on ")
    work = tempfile.mkdtemp(prefix="wasched-kube-bench-")
    kubeconfig = os.path.join(work, "kubeconfig")
    with open(kubeconfig, "w") as f:
        f.write(f"apiVersion: v1\nkind: Config\nclusters:\n- name: e\n  cluster:\n    server: {url}\n"
                "contexts:\n- name: e\n  context:\n    cluster: e\n    user: u\n"
                "current-context: e\nusers:\n- name: u\n  user:\n    token: t\n")
    scheduler = None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            started = time.monotonic()
            await create_all(session, url, "/api/v1/nodes", [node(i) for i in range(args.nodes)],
                             args.clients)
            nodes_took = time.monotonic() - started
            print(f"{args.nodes} nodes created in {nodes_took:.1f} s "
                  f"({args.nodes / nodes_took:.0f}/s)")

            scheduler = subprocess.Popen(
                [args.wasched, "serve", "--kubernetes", "--kubeconfig", kubeconfig,
                 "--listen", "127.0.0.1:0", "--data-dir", os.path.join(work, "data"),
                 "--leader-elect", "false", "--kube-api-qps", args.qps,
                 "--kube-api-burst", args.burst],
                stdout=subprocess.PIPE, env={**os.environ, "WASCHED_LOG": "warn"})
            wasched = first_line(scheduler, "wasched listening on ")
            ready_from = time.monotonic()
            while True:
                try:
                    async with session.get(wasched + "/readyz") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
            print(f"wasched ready (every kind listed) after {time.monotonic() - ready_from:.2f} s")

            cpu_before = (cpu_seconds(api.pid), cpu_seconds(scheduler.pid),
                          time.process_time())
            started = time.monotonic()
            creating = asyncio.ensure_future(create_all(
                session, url, "/api/v1/namespaces/default/pods",
                [pod(i) for i in range(args.pods)], args.clients))
            created_took = None
            while True:
                await asyncio.sleep(0.5)
                if creating.done() and created_took is None:
                    creating.result()
                    created_took = time.monotonic() - started
                # Binding requests, refused ones included: only then is a full list worth it.
                if await bindings(session, url) >= args.pods and created_took is not None \
                        and await unbound(session, url) == 0:
                    break
            took = time.monotonic() - started
            if created_took is None:
                await creating
                created_took = time.monotonic() - started
            cpu_after = (cpu_seconds(api.pid), cpu_seconds(scheduler.pid), time.process_time())
            left = await unbound(session, url)
            binding_requests = await bindings(session, url)
            async with session.get(wasched + "/metrics") as response:
                figures = metric_sums(await response.text())
            async with session.get(url + "/_test/binding-latencies") as response:
                latency = await response.json()

        print(f"{args.pods} pods created in {created_took:.1f} s "
              f"({args.pods / created_took:.0f}/s, {args.clients} clients)")
        print(f"{args.pods} pods bound in {took:.1f} s from the first creation: "
              f"{args.pods / took:.0f} pods/s end to end ({left} left unbound, "
              f"{binding_requests - args.pods} binding requests refused)")
        emulator, waschd, client = (after - before for before, after in zip(cpu_before, cpu_after))
        print(f"CPU seconds in that time: emulator {emulator:.1f}, wasched {waschd:.1f} "
              f"({waschd * 1e3 / args.pods:.3f} ms a pod), this client {client:.1f} "
              f"(of {took:.1f} s wall, 2 cores)")
        if latency["count"]:
            print(f"creation to binding (emulator clock, {latency['count']} pods): "
                  f"p50 {latency['p50'] * 1e3:.0f} ms, p99 {latency['p99'] * 1e3:.0f} ms, "
                  f"max {latency['max'] * 1e3:.0f} ms")
        attempts = figures.get("scheduler_scheduling_attempt_duration_seconds_count", 0)
        if attempts:
            mean = figures["scheduler_scheduling_attempt_duration_seconds_sum"] / attempts
            print(f"wasched: {attempts:.0f} scheduling attempts, mean {mean * 1e6:.0f} us "
                  f"(cycle only); {figures.get('wasched_status_writes_total', 0):.0f} results "
                  f"written, {figures.get('wasched_api_write_failures_total', 0):.0f} refused")
        print(json.dumps({"nodes": args.nodes, "pods": args.pods, "pods_per_second": args.pods / took,
                          "emulator_cpu_s": emulator, "wasched_cpu_s": waschd,
                          "wasched_cpu_ms_per_pod": waschd * 1e3 / args.pods,
                          "client_cpu_s": client, "qps": float(args.qps),
                          "p50_create_to_bind_s": latency["p50"],
                          "p99_create_to_bind_s": latency["p99"]}))
    finally:
        for process in (scheduler, api):
            if process is not None:
                process.kill()
                process.wait()


if __name__ == "__main__":
    asyncio.run(main())
