"""A bench-only embedder over any BERT-style ONNX file that uses the MiniLM WordPiece vocabulary.

It lets ``bench/embedding.py`` and ``bench/locomo_retrieval.py --onnx LABEL=PATH`` measure a candidate
model (an fp32 export of the shipped MiniLM, the 3-layer paraphrase MiniLM that a registry package
ships, …) beside the shipped int8 model, with the same tokenizer, pooling and batching as
``LocalMiniLMEmbedder``. Nothing in ``tempomem`` imports it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tempomem.recall.embedding import LOCAL_BATCH, LOCAL_MAX_TOKENS, TOKENIZER_PATH, mean_pool
from tempomem.recall.embedding_types import EmbeddingIdentity


class OnnxFileEmbedder:
    """Mean-pooled, L2-normalised rows from the first rank-3 (batch, tokens, dim) output of ``path``."""

    def __init__(
        self, path: Path, label: str, *, threads: int | None = None, batch_size: int = LOCAL_BATCH
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or max(1, min(4, os.cpu_count() or 1))
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.input_names = {i.name for i in self.session.get_inputs()}
        token_outputs = [o for o in self.session.get_outputs() if len(o.shape) == 3]
        if not token_outputs or not isinstance(token_outputs[0].shape[-1], int):
            raise ValueError(f"{path}: no (batch, tokens, dim) output to mean-pool")
        self.output_name = token_outputs[0].name
        dim = int(token_outputs[0].shape[-1])
        self.identity = EmbeddingIdentity("onnx-file", label, dim)
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self.tokenizer.enable_truncation(max_length=LOCAL_MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_type_id=0, pad_token="[PAD]")
        self.batch_size = batch_size

    def _batch(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = self.session.run([self.output_name], feeds)
        return mean_pool(hidden, mask)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.identity.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            out[chunk] = self._batch([texts[i] for i in chunk])
        return out


def parse_onnx_arg(value: str) -> tuple[str, Path]:
    """``LABEL=PATH`` → (label, path); the label names the rows and the embedding cache entry."""
    label, sep, path = value.partition("=")
    if not sep or not label or not path:
        raise ValueError(f"--onnx wants LABEL=PATH, got {value!r}")
    if not Path(path).is_file():
        raise ValueError(f"--onnx {label}: no file at {path}")
    return label, Path(path)
