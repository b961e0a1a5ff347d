"""Load on the OpenAI-compatible server: C concurrent clients for S seconds, batching (max_batch = C)
vs one request at a time (max_batch = 1), same model, same requests, measured side by side in one
run. Prints one JSON object: requests/s, p50/p95 latency, errors, and the batching speedup.

Loopback only and bounded: the server binds 127.0.0.1, each phase stops after --seconds (at most
600) or --max-requests, every request has a timeout.

    python benchmarks/serve_load.py --model tiny-random --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

import httpx
import torch

from trace_agents.agent.policy import make_policy
from trace_agents.serve.app import create_app, running

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CITIES = ["Paris", "Oslo", "Lima", "Kyiv", "Warsaw", "Tokyo", "Cairo", "Quito"]


async def client_loop(http: httpx.AsyncClient, url: str, model: str, i: int, stop_at: float, budget: list[int],
                      latencies: list[tuple[float, float]], errors: list[str], max_tokens: int) -> None:
    n = 0
    while time.monotonic() < stop_at and budget[0] > 0:
        budget[0] -= 1
        body = {"model": model, "max_tokens": max_tokens, "temperature": 0, "tools": TOOLS,
                "messages": [{"role": "user", "content": f"What is the weather in {CITIES[(i + n) % len(CITIES)]}?"}]}
        n += 1
        started = time.perf_counter()
        try:
            resp = await http.post(url + "/chat/completions", json=body)
            if resp.status_code != 200:
                errors.append(f"HTTP {resp.status_code}: {resp.text[:120]}")
                continue
            resp.json()["choices"][0]["message"]
        except (httpx.HTTPError, ValueError, KeyError) as e:
            errors.append(f"{type(e).__name__}: {e}")
            continue
        latencies.append((time.monotonic(), time.perf_counter() - started))


async def load(url: str, model: str, clients: int, seconds: float, max_requests: int, max_tokens: int) -> dict:
    latencies: list[tuple[float, float]] = []  # (finished at, latency)
    errors: list[str] = []
    budget = [max_requests]
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        stop_at = time.monotonic() + seconds
        await asyncio.gather(*[client_loop(http, url, model, i, stop_at, budget, latencies, errors, max_tokens)
                               for i in range(clients)])
        drain = time.monotonic() - stop_at
    # Throughput counts replies finished inside the window: the requests still open when it
    # closes (one per client) drain afterwards and would otherwise skew one-at-a-time the most.
    in_window = sum(1 for done, _ in latencies if done <= stop_at)
    lat = sorted(x for _, x in latencies)
    pct = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 3) if lat else None  # noqa: E731
    return {"window_s": round(seconds, 1), "drain_s": round(max(drain, 0.0), 1), "requests": len(lat),
            "requests_in_window": in_window, "errors": len(errors), "error_samples": errors[:3],
            "requests_per_s": round(in_window / seconds, 2), "p50_latency_s": pct(0.50), "p95_latency_s": pct(0.95),
            "mean_latency_s": round(statistics.fmean(lat), 3) if lat else None}


def phase(policy, model: str, max_batch: int, args) -> dict:
    app = create_app(policy, model, max_batch=max_batch, batch_wait_ms=args.batch_wait_ms,
                     max_queue=4 * args.clients)
    with running(app, host="127.0.0.1") as url:
        result = asyncio.run(load(url, model, args.clients, args.seconds, args.max_requests, args.max_tokens))
        sizes = app.state.batcher.stats.batch_sizes
    result["max_batch"] = max_batch
    result["mean_batch_size"] = round(statistics.fmean(sizes), 2) if sizes else None
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-random", help="tiny-random, smollm2-135m or a local folder")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60.0, help="per phase (at most 600)")
    ap.add_argument("--max-requests", type=int, default=100_000, help="per phase, a hard cap")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--batch-wait-ms", type=float, default=10.0)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.seconds = min(args.seconds, 600.0)

    load_before = os.getloadavg()
    policy = make_policy(args.model, dtype=args.dtype, batch_size=args.clients)
    name = args.model
    from trace_agents.agent.policy import Request, Sampling
    from trace_agents.types import Message

    policy.act([Request([Message(role="user", content="warm up")], TOOLS)], Sampling(max_new_tokens=4))
    single = phase(policy, name, 1, args)
    batched = phase(policy, name, args.clients, args)
    print(json.dumps({
        "benchmark": "serve_load", "model": args.model, "dtype": args.dtype, "clients": args.clients,
        "max_tokens": args.max_tokens, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "one_at_a_time": single, "batched": batched,
        "speedup": round(batched["requests_per_s"] / single["requests_per_s"], 2) if single["requests_per_s"] else None,
        "zero_errors": single["errors"] == 0 and batched["errors"] == 0,
    }, indent=2))


if __name__ == "__main__":
    main()
