"""Forward latency of the composed top-1 mixture of LoRA experts vs the base model alone and vs PEFT's
X-LoRA, same adapters (4 by default, random weights) and same inputs, measured side by side in one
run (variants interleaved, so load drift hits them alike). Prints one JSON object. The composed
model's gates are random (untrained gates send every token to "none", which would flatter it), so
tokens spread over all five slots; "routing_share" reports the split.

    python benchmarks/moe_forward.py --model tiny-random
    python benchmarks/moe_forward.py --model smollm2-135m --repeats 5

Targets (issue 6): composed ≤ 1.25× base, composed ≤ 0.6× X-LoRA. Also reported: both delta kernels
of LoraExperts ("index" for prefill, "gather" for decode steps), one PEFT LoRA adapter alone, and one
decode step of `generate` (batch × 1 new token over a cached prompt; X-LoRA has no KV cache).

On a shared, oversubscribed CPU run it with OMP_WAIT_POLICY=PASSIVE (or --threads 1): with torch's
default spin-waiting OpenMP threads, every small op waits for a descheduled co-thread, which
inflates anything made of many small ops (LoRA deltas, routers) by up to 10× and says more about the
machine's load than about the kernels. The JSON records the policy, threads and load average.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from trace_agents.compose import ComposeConfig, compose
from trace_agents.models import load_model
from trace_agents.training.grpo import randomize_lora_b

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_adapters(base, root: Path, n: int, rank: int) -> dict[str, Path]:
    from peft import LoraConfig, get_peft_model

    out = {}
    for i in range(n):
        torch.manual_seed(i)
        peft = get_peft_model(copy.deepcopy(base), LoraConfig(r=rank, lora_alpha=rank, target_modules=TARGETS))
        randomize_lora_b(peft, 0.02)
        peft.save_pretrained(root / f"expert{i}")
        out[f"expert{i}"] = root / f"expert{i}"
    return out


def make_xlora(base, adapters: dict[str, Path]):
    """PEFT's X-LoRA over the same folders (dense softmax mixture; needs use_cache=False)."""
    from peft import XLoraConfig, get_peft_model

    model = copy.deepcopy(base)
    model.config.use_cache = False
    # Keys "0", "1", ...: peft 0.21.2 loads the experts under those names but activates the config's
    # keys, so any other names fail at the first forward (KeyError in disable_adapter_layers).
    cfg = XLoraConfig(task_type="CAUSAL_LM", hidden_size=model.config.hidden_size,
                      adapters={str(i): str(v) for i, v in enumerate(adapters.values())}, xlora_depth=1)
    return get_peft_model(model, cfg).eval()


def measure(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds per call; one warm-up call each, then `repeats` rounds over all variants."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        for fn in fns.values():
            fn()
        for _ in range(repeats):
            for k, fn in fns.items():
                t = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t)
    return {k: round(statistics.median(v), 4) for k, v in times.items()}


def decode_step(model, ids, attn):
    """A callable running one cached decode step (batch × 1 token) after a prompt of `ids`."""
    with torch.no_grad():
        cache = model(input_ids=ids, attention_mask=attn, use_cache=True).past_key_values
    n = ids.shape[1]
    nxt, attn1 = ids[:, -1:], torch.cat([attn, attn[:, -1:]], dim=1)
    pos = torch.full_like(nxt, n)

    def step():
        model(input_ids=nxt, attention_mask=attn1, position_ids=pos, past_key_values=cache, use_cache=True)
        cache.crop(-1)  # back to the prompt, so every call is the same step

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--decide", default="causal_mean", choices=("token", "causal_mean"), help="top-1 per token or over the running mean")
    ap.add_argument("--no-gather", action="store_true", help="skip the prefill forward with the gather kernel (slow)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    load_before = os.getloadavg()
    base, tok = load_model(args.model, device="cpu", dtype=args.dtype)
    base.config.use_cache = False
    torch.manual_seed(0)
    ids = torch.randint(100, len(tok), (args.batch, args.seq))
    attn = torch.ones_like(ids)
    run = lambda m: (lambda: m(input_ids=ids, attention_mask=attn, use_cache=False))  # noqa: E731

    with tempfile.TemporaryDirectory() as tmp:
        adapters = make_adapters(base, Path(tmp), args.adapters, args.rank)
        composed = compose(copy.deepcopy(base), adapters, base_model_name=args.model, config=ComposeConfig(decide=args.decide))
        torch.manual_seed(1)
        for router in composed.routers.values():  # untrained gates route everything to "none": randomise
            nn.init.normal_(router.proj.weight, std=1.0)
        gathered = compose(copy.deepcopy(base), adapters, base_model_name=args.model, config=ComposeConfig(decide=args.decide))
        gathered.routers.load_state_dict(composed.routers.state_dict())
        gathered.set_kernel("gather")

        from peft import PeftModel

        single = PeftModel.from_pretrained(copy.deepcopy(base), str(adapters["expert0"])).eval()
        fns = {"base": run(base), "composed": run(composed), "peft_one_lora": run(single)}
        if not args.no_gather:
            fns["composed_gather_kernel"] = run(gathered)
        xlora_error = None
        try:
            fns["xlora"] = run(make_xlora(base, adapters))
            with torch.no_grad():
                fns["xlora"]()
        except Exception as e:  # report why instead of failing the whole benchmark
            xlora_error = f"{type(e).__name__}: {e}"
        latency = measure(fns, args.repeats)
        with torch.no_grad():
            composed(input_ids=ids, attention_mask=attn)
        share = torch.bincount(torch.stack(list(composed.routing().values())).flatten(), minlength=args.adapters + 1)
        decode = measure({"base": decode_step(base, ids, attn), "composed": decode_step(composed, ids, attn),
                          "composed_gather_kernel": decode_step(gathered, ids, attn)}, args.repeats * 4)

    vs_base = latency["composed"] / latency["base"]
    vs_xlora = latency["composed"] / latency["xlora"] if "xlora" in latency else None
    print(json.dumps({
        "benchmark": "moe_forward", "model": args.model, "dtype": args.dtype, "batch": args.batch, "seq": args.seq,
        "adapters": args.adapters, "rank": args.rank, "decide": args.decide, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "forward_s_median": latency, "decode_step_s_median": decode,
        "routing_share": [round(float(x) / float(share.sum()), 3) for x in share],
        "composed_vs_base": round(vs_base, 3), "target_vs_base": 1.25, "meets_vs_base": vs_base <= 1.25,
        "composed_vs_xlora": None if vs_xlora is None else round(vs_xlora, 3), "target_vs_xlora": 0.6,
        "meets_vs_xlora": None if vs_xlora is None else vs_xlora <= 0.6, "xlora_error": xlora_error,
    }, indent=2))


if __name__ == "__main__":
    main()
