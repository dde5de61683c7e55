"""The ``spruce demo`` command: all-MiniLM-L6-v2 loaded, summarised, used, saved, reloaded and
drawn (imports JAX).

The presentation around the library API of ``spruce.models.minilm`` (``load``, ``encode``,
``model_path``): rich tables on the terminal, an HTML page and a treemap written beside the
saved checkpoint.

The demo turns on JAX's persistent compilation cache (``minilm.enable_compilation_cache()``:
``~/.cache/spruce/jax``, or ``$SPRUCE_JAX_CACHE``; ``SPRUCE_JAX_CACHE=off`` keeps it off), so
that a second run does not compile again: a program may choose this process-wide setting, the
library does not make it for its users.
"""

from __future__ import annotations

import os
import pathlib
import sys
import tempfile
import time
from typing import Any

import numpy as np

from .._arrays import format_bytes

SENTENCES = (
    "A man is playing a guitar on stage.",
    "Someone strums an acoustic guitar in front of an audience.",
    "The stock market fell sharply on Monday.",
    "Shares dropped at the start of the week.",
    "A cat is asleep on the sofa.",
    "A kitten naps on the couch.",
)


class Outputs(dict[str, pathlib.Path]):
    """The files ``run`` wrote and kept: ``checkpoint``, ``page``, ``treemap`` (none without
    ``out_dir``)."""


def run(console: Any = None, *, out_dir: str | os.PathLike[str] | None = None) -> Outputs:
    """all-MiniLM-L6-v2 loaded, summarised, used, saved, reloaded and drawn.

    Prints (with rich) the checkpoint as a tree with the parameter count of each subtree
    (22,713,728 in all), the cosine-similarity matrix of a few sentences and the pairs ranked
    most similar; saves the Module with ``spruce.io.save`` to ``out_dir`` and reloads it with
    ``spruce.io.load`` with and without ``like=``, checking that both equal the original
    (``spruce.tree_equal``) and that the embeddings are unchanged; then writes the Module's
    page (``spruce.view.html``) and treemap (``spruce.view.treemap``) beside the checkpoint and
    prints their paths.  Takes about 5 s on two CPU cores (most of it the one jit compilation).
    Turns on JAX's persistent compilation cache (see the module's docstring).

    Args:
      console: a ``rich.console.Console`` to print to; default a new one on stdout (160
        columns wide when stdout is not a terminal and ``COLUMNS`` is unset, as the CLI).
      out_dir: the folder for ``minilm.safetensors``, ``minilm.html`` and ``minilm.svg``
        (created if missing), which are kept; default a new temporary folder, removed at the
        end with all three files (87 MB of checkpoint): nothing is left behind.

    Returns:
      The paths written and kept (``Outputs``: ``checkpoint``, ``page``, ``treemap``; empty
      without ``out_dir``).

    Raises:
      The errors of ``minilm.load`` (ModuleNotFoundError, FileNotFoundError, ValueError and
      spruce.io's errors, all one-line messages) for a missing or broken checkpoint; OSError
      when ``out_dir`` cannot be written; RuntimeError if a reloaded copy differs (a bug).
    """
    from rich.console import Console

    from spruce.models import minilm

    if console is None:
        wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
        console = Console(file=sys.stdout, highlight=False, width=160 if wide else None)
    start = time.perf_counter()
    minilm.enable_compilation_cache()
    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="spruce-demo-") as folder:
            _run(console, minilm, pathlib.Path(folder), keep=False)
        outputs = Outputs()
    else:
        outputs = _run(console, minilm, pathlib.Path(out_dir), keep=True)
    console.print(f"\n[bold]done[/bold] in {time.perf_counter() - start:.1f} s")
    return outputs


def _run(console: Any, minilm: Any, folder: pathlib.Path, *, keep: bool) -> Outputs:
    from rich.table import Table

    import spruce
    import spruce.io
    import spruce.view
    from spruce.models.bert import checkpoint_key

    console.print("[bold]spruce demo[/bold]: all-MiniLM-L6-v2, a pretrained sentence-embedding "
                  "transformer, as a spruce Module")

    # 1. The checkpoint, loaded through spruce.io into a BertModel.
    t = time.perf_counter()
    source = minilm.model_path() / "model.safetensors"
    model = minilm.load()
    s = spruce.summary(model, max_depth=2)
    console.print(f"\n[bold]1. Load[/bold] {source}")
    console.print(f"   spruce.io.load(path, like=BertModel.skeleton(config), rename=bert.checkpoint_key): "
                  f"{s.arrays} tensors, {s.params:,} parameters, {format_bytes(s.bytes)}, "
                  f"{time.perf_counter() - t:.1f} s")
    console.print("   names mapped from the checkpoint's to the Module's, e.g.")
    for name in ("encoder.layer.0.attention.self.query.weight", "encoder.layer.5.output.LayerNorm.bias",
                 "pooler.dense.weight"):
        console.print(f"     {name}  ->  {checkpoint_key(name)}")
    table = Table(title="the Module as a tree (spruce.summary, depth 2)", title_justify="left")
    table.add_column("subtree")
    table.add_column("type")
    for column in ("arrays", "parameters", "bytes"):
        table.add_column(column, justify="right")
    for row in s.rows:
        table.add_row("  " * row.depth + _last_component(row.path), row.type_name, str(row.arrays),
                      f"{row.params:,}", format_bytes(row.bytes), style="bold" if row.depth == 0 else None)
    console.print(table)

    # 2. Embeddings and their cosine similarities.
    t = time.perf_counter()
    emb = minilm.encode(SENTENCES)
    elapsed = time.perf_counter() - t
    sims = emb @ emb.T
    n = len(SENTENCES)
    console.print(f"\n[bold]2. Embed[/bold] {n} sentences with minilm.encode: float32{list(emb.shape)}, "
                  f"rows of norm 1, {elapsed:.1f} s (one jit compilation included)")
    for i, text in enumerate(SENTENCES):
        console.print(f"   [{i + 1}] {text}", markup=False)
    table = Table(title="cosine similarity (emb @ emb.T)", title_justify="left")
    table.add_column("")
    for j in range(n):
        table.add_column(f"\\[{j + 1}]", justify="right")
    for i in range(n):
        table.add_row(f"\\[{i + 1}]", *(_similarity_cell(float(sims[i, j]), i == j) for j in range(n)))
    console.print(table)
    pairs = sorted(((float(sims[i, j]), i, j) for i in range(n) for j in range(i + 1, n)), reverse=True)
    table = Table(title=f"the {len(pairs)} pairs ranked, top 4", title_justify="left")
    table.add_column("rank", justify="right")
    table.add_column("cosine", justify="right")
    table.add_column("pair")
    for rank, (score, i, j) in enumerate(pairs[:4], start=1):
        table.add_row(str(rank), f"{score:.3f}", f"\\[{i + 1}] {SENTENCES[i]}  ~  \\[{j + 1}] {SENTENCES[j]}")
    console.print(table)

    # 3. Save with spruce.io, reload with and without `like`, compare.
    t = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    outputs = Outputs(checkpoint=folder / "minilm.safetensors", page=folder / "minilm.html",
                      treemap=folder / "minilm.svg")
    path = outputs["checkpoint"]
    spruce.io.save(path, model)
    console.print(f"\n[bold]3. Save and reload[/bold] spruce.io.save(path, model) wrote "
                  f"{path}, {format_bytes(path.stat().st_size)}")
    for what, reloaded in (
        ("spruce.io.load(path, like=model)", spruce.io.load(path, like=model)),
        ("spruce.io.load(path)", spruce.io.load(path)),
    ):
        if not spruce.tree_equal(model, reloaded):
            raise RuntimeError(f"spruce demo: {what} differs from the saved Module")
        console.print(f"   [green]ok[/green] {what} -> a {type(reloaded).__name__} of "
                      f"{spruce.summary(reloaded).params:,} parameters; spruce.tree_equal(model, it) is True")
    again = minilm.encode(SENTENCES)
    if not np.array_equal(again, emb):
        raise RuntimeError("spruce demo: the embeddings changed between two runs")
    console.print(f"   [green]ok[/green] encode again: the same embeddings, bit for bit "
                  f"({time.perf_counter() - t:.1f} s for this step)")

    # 4. Pictures of the Module, beside the checkpoint.
    t = time.perf_counter()
    outputs["page"].write_text(spruce.view.html(model, title="all-MiniLM-L6-v2 (BertModel)"), encoding="utf-8")
    outputs["treemap"].write_text(spruce.view.treemap(model, title="all-MiniLM-L6-v2"), encoding="utf-8")
    console.print(f"\n[bold]4. Pictures[/bold] ({time.perf_counter() - t:.1f} s)")
    if keep:
        console.print(f"   the Module as a page:   {outputs['page']}", markup=False, soft_wrap=True)
        console.print(f"   its bytes as a treemap: {outputs['treemap']}", markup=False, soft_wrap=True)
        return outputs
    console.print(f"   the Module as a page ({format_bytes(outputs['page'].stat().st_size)}) and its bytes "
                  f"as a treemap ({format_bytes(outputs['treemap'].stat().st_size)}) were written to a "
                  "temporary folder, now removed with the checkpoint: `spruce demo --out DIR` keeps all three",
                  markup=False, soft_wrap=True)
    return Outputs()


def _last_component(path: str) -> str:
    """The last entry of a key-path string, for an indented tree: ``'.layers[0]'`` -> ``'[0]'``,
    ``'.embeddings.layer_norm'`` -> ``'layer_norm'``, ``''`` -> ``'(root)'``.

    >>> [_last_component(p) for p in ("", ".layers[0]", ".embeddings.layer_norm")]
    ['(root)', '[0]', 'layer_norm']
    """
    if not path:
        return "(root)"
    cut = max(path.rfind("."), path.rfind("["))
    return path[cut:] if path[cut] == "[" else path[cut + 1:]


def _similarity_cell(value: float, diagonal: bool) -> str:
    if diagonal:
        return "[dim]1.000[/dim]"
    if value >= 0.5:
        return f"[bold green]{value:.3f}[/bold green]"
    return f"{value:.3f}"
