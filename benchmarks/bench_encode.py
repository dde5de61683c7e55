"""spruce.models.minilm.encode against sentence-transformers on PyTorch, side by side.

Each measurement runs in a fresh process (so "cold" is really cold): the first ``encode`` of
512 random sentences of 3-60 words (model loading included), then warm calls on the same
sentences.  spruce runs three ways: with an empty JAX persistent compilation cache (cold, first
process: what every process costs without the cache, which ``encode`` does not turn on by
itself; here ``SPRUCE_JAX_CACHE`` asks for it), with the cache the first process filled (cold,
second process), and warm.  Both libraries get 2 threads.  The machine may be shared: every
figure is the median of ``--repeat`` processes, and each repeat runs spruce's two processes
and then PyTorch's, so that a change of load affects both.  Besides the elapsed (wall) time,
each process reports its CPU time (all threads, ``time.process_time``), which other jobs on a
busy machine disturb much less.

    python benchmarks/bench_encode.py [--repeat 3] [--warm 5]

Needs sentence-transformers and torch (not dependencies of spruce) for the peer's column.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from typing import Any

N_SENTENCES = 512

_WORDS = (
    "the of and to in is was he for it with as his on be at by had are but from or have an they "
    "which one you were all her she there would their we him been has when who will no more if "
    "out so said what up its about than into them can only other time new some could these two "
    "may first then do any like my now over such our man me even most made after also did many "
    "off before must well back through years much where your way down should because long each "
    "just state people those too how little good world very still own see men work day get "
    "here between both life being under never know same last another while us might great old "
    "year come since against go came right used take three himself few house use during without "
    "again place around however home small found thought went say part once general high upon "
    "school every does got united left number course war until always away something fact "
    "though water less public put think almost hand enough far took head yet government system "
    "better set told nothing night end why called didn't eyes find going look asked later knew "
    "point next city program business give group toward young days let room president side "
    "social present given several order national second possible rather per face among form "
    "important often things looked early white case john become large big need four within felt "
    "along children saw best church ever least power development light thing seemed family "
    "interest want members mind country area others done turned although open god service "
    "certain kind problem began different door thus help sense means whole matter perhaps itself"
).split()


def sentences(n: int = N_SENTENCES, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 60))]
        out.append(" ".join(words).capitalize() + ".")
    return out


_SPRUCE = """
import time, json, sys
sys.path.insert(0, {src!r})
from bench_encode import sentences
S = sentences()
from spruce.models import minilm
t, c = time.perf_counter(), time.process_time()
minilm.encode(S)
cold, cold_cpu = time.perf_counter() - t, time.process_time() - c
warm, warm_cpu = [], []
for _ in range({warm}):
    t, c = time.perf_counter(), time.process_time()
    minilm.encode(S)
    warm.append(time.perf_counter() - t); warm_cpu.append(time.process_time() - c)
print(json.dumps({{"cold": cold, "warm": warm, "cold_cpu": cold_cpu, "warm_cpu": warm_cpu}}))
"""

_TORCH = """
import time, json, sys
sys.path.insert(0, {src!r})
from bench_encode import sentences
S = sentences()
import torch
torch.set_num_threads(2)
from sentence_transformers import SentenceTransformer
from spruce.models import minilm
path = str(minilm.model_path())
t, c = time.perf_counter(), time.process_time()
model = SentenceTransformer(path, device="cpu")
model.encode(S, normalize_embeddings=True)
cold, cold_cpu = time.perf_counter() - t, time.process_time() - c
warm, warm_cpu = [], []
for _ in range({warm}):
    t, c = time.perf_counter(), time.process_time()
    model.encode(S, normalize_embeddings=True)
    warm.append(time.perf_counter() - t); warm_cpu.append(time.process_time() - c)
print(json.dumps({{"cold": cold, "warm": warm, "cold_cpu": cold_cpu, "warm_cpu": warm_cpu}}))
"""


def run(code: str, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, OMP_NUM_THREADS="2", MKL_NUM_THREADS="2", TOKENIZERS_PARALLELISM="false")
    names = ("spruce cold (1st process)", "spruce cold (2nd process)", "spruce warm", "torch cold", "torch warm")
    wall: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}

    def add(name: str, result: dict[str, Any], kind: str) -> None:
        for rows, suffix in ((wall, ""), (cpu, "_cpu")):
            value = result[kind + suffix]
            rows[name].append(statistics.median(value) if isinstance(value, list) else float(value))

    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as cache:
            e = dict(env, SPRUCE_JAX_CACHE=cache)
            first = run(textwrap.dedent(_SPRUCE.format(src=here, warm=args.warm)), e)
            second = run(textwrap.dedent(_SPRUCE.format(src=here, warm=args.warm)), e)
        print(f"  spruce: 1st process {first}, 2nd process {second}", flush=True)
        add("spruce cold (1st process)", first, "cold")
        add("spruce cold (2nd process)", second, "cold")
        add("spruce warm", {k: first[k] + second[k] for k in ("warm", "warm_cpu")}, "warm")
        if not args.no_torch:
            t = run(textwrap.dedent(_TORCH.format(src=here, warm=args.warm)), env)
            print(f"  torch: {t}", flush=True)
            add("torch cold", t, "cold")
            add("torch warm", t, "warm")
    print(f"{N_SENTENCES} sentences of 3-60 words, 2 threads; medians of {args.repeat} processes")
    print(f"{'':28} {'wall s':>8} {'CPU s':>8} {'sentences/s':>12}")
    for name in names:
        if wall[name]:
            m, c = statistics.median(wall[name]), statistics.median(cpu[name])
            print(f"{name:28} {m:8.2f} {c:8.2f} {N_SENTENCES / m:12.0f}   "
                  f"(wall: {', '.join(f'{x:.2f}' for x in wall[name])}; CPU: {', '.join(f'{x:.2f}' for x in cpu[name])})")
    if wall["torch warm"]:
        print("spruce / sentence-transformers (wall, CPU):")
        for ours, theirs in (("spruce warm", "torch warm"), ("spruce cold (1st process)", "torch cold"),
                             ("spruce cold (2nd process)", "torch cold")):
            print(f"  {ours:28} {statistics.median(wall[ours]) / statistics.median(wall[theirs]):.2f}  "
                  f"{statistics.median(cpu[ours]) / statistics.median(cpu[theirs]):.2f}")


if __name__ == "__main__":
    main()
