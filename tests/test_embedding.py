"""Embedding providers: the real offline MiniLM model and HTTP providers behind a real loopback server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tempomem.recall.embedding import (
    EmbeddingError,
    EmbeddingIdentity,
    EmbeddingProvider,
    HttpEmbedder,
    LocalMiniLMEmbedder,
    make_embedder,
)
from tests.helpers.embed_server import EmbedServer, fake_vector


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedder:
    return LocalMiniLMEmbedder()


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_identity_key_is_stable_and_distinct() -> None:
    a = EmbeddingIdentity("local", "all-MiniLM-L6-v2-int8", 384)
    assert a.key() == EmbeddingIdentity("local", "all-MiniLM-L6-v2-int8", 384).key()
    assert a.key() != EmbeddingIdentity("local", "all-MiniLM-L6-v2-int8", 256).key()
    assert a.key() != EmbeddingIdentity("ollama", "all-MiniLM-L6-v2-int8", 384).key()
    assert len(a.key()) < 40 and a.key().replace("-", "").isalnum()


def test_local_embedder_shape_norm_and_protocol(minilm: LocalMiniLMEmbedder) -> None:
    assert isinstance(minilm, EmbeddingProvider)
    assert minilm.identity == EmbeddingIdentity("local", "all-MiniLM-L6-v2-int8", 384)
    v = minilm.embed(["one", "two words", "a much longer sentence " * 200])  # truncated, not failing
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


def test_local_embedder_semantics(minilm: LocalMiniLMEmbedder) -> None:
    cat, cat2, tax = minilm.embed(
        ["The cat sits on the mat", "A cat is sitting on a mat", "Quarterly tax filing deadline"]
    )
    assert cos(cat, cat2) > 0.6
    assert cos(cat, cat2) > cos(cat, tax) + 0.4
    tea, drink = minilm.embed(["Morgan prefers green tea.", "What does Morgan like to drink?"])
    assert cos(tea, drink) > 0.5


def test_local_embedder_order_independent_of_batching(minilm: LocalMiniLMEmbedder) -> None:
    # Internal length-sorting and batching must hand rows back in the caller's order.
    texts = [f"sentence {'x ' * (i % 7)} number {i}" for i in range(70)]
    together = minilm.embed(texts)
    single = np.stack([minilm.embed([t])[0] for t in texts[:5]])
    np.testing.assert_allclose(together[:5], single, atol=1e-4)


@pytest.fixture
def embed_server() -> Iterator[EmbedServer]:
    server = EmbedServer()
    yield server
    server.close()


def _expected(texts: list[str], dim: int) -> np.ndarray:
    v = np.array([fake_vector(t, dim) for t in texts], dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_ollama_embedder(embed_server: EmbedServer) -> None:
    e = make_embedder("ollama", "nomic-embed-text", 8, embed_server.url)
    assert isinstance(e, HttpEmbedder) and e.identity == EmbeddingIdentity("ollama", "nomic-embed-text", 8)
    texts = ["alpha", "beta", "gamma"]
    np.testing.assert_allclose(e.embed(texts), _expected(texts, 8), atol=1e-6)
    path, body, auth = embed_server.requests[-1]
    assert path == "/api/embed" and body == {"model": "nomic-embed-text", "input": texts} and auth is None


def test_lmstudio_and_openai_embedders(embed_server: EmbedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [f"text {i}" for i in range(5)]
    lm = make_embedder("lmstudio", "text-embedding-nomic", 8, embed_server.url)
    np.testing.assert_allclose(lm.embed(texts), _expected(texts, 8), atol=1e-6)
    path, body, auth = embed_server.requests[-1]
    assert path == "/v1/embeddings" and "dimensions" not in body and auth is None

    monkeypatch.setenv("OPENAI_API_KEY", "test-key-123")
    oa = make_embedder("openai", "text-embedding-3-small", 8, embed_server.url)
    np.testing.assert_allclose(oa.embed(texts), _expected(texts, 8), atol=1e-6)
    path, body, auth = embed_server.requests[-1]
    assert body["dimensions"] == 8 and auth == "Bearer test-key-123"


def test_TIER04_an_http_provider_gets_at_most_32_texts_a_request(embed_server: EmbedServer) -> None:
    e = make_embedder("ollama", "m", 8, embed_server.url)
    texts = [f"t{i}" for i in range(70)]
    np.testing.assert_allclose(e.embed(texts), _expected(texts, 8), atol=1e-6)
    assert [len(b["input"]) for _, b, _ in embed_server.requests] == [32, 32, 6]


def test_http_embedder_batches(embed_server: EmbedServer) -> None:
    e = HttpEmbedder("ollama", "m", 8, embed_server.url, batch_size=4)
    texts = [f"t{i}" for i in range(10)]
    np.testing.assert_allclose(e.embed(texts), _expected(texts, 8), atol=1e-6)
    assert [len(b["input"]) for _, b, _ in embed_server.requests] == [4, 4, 2]


def test_http_wrong_dimension_is_typed_error(embed_server: EmbedServer) -> None:
    e = make_embedder("ollama", "m", 16, embed_server.url)  # the server answers 8-dim vectors
    with pytest.raises(EmbeddingError, match="dimension 8"):
        e.embed(["x"])


def test_http_unreachable_or_bad_path_is_typed_error(embed_server: EmbedServer) -> None:
    with pytest.raises(EmbeddingError):
        HttpEmbedder("ollama", "m", 8, embed_server.url + "/nope").embed(["x"])
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EmbeddingError):
        HttpEmbedder("ollama", "m", 8, f"http://127.0.0.1:{port}", timeout=2).embed(["x"])


def test_http_embedder_output_is_float32_and_an_empty_batch_asks_nothing(embed_server: EmbedServer) -> None:
    e = HttpEmbedder("ollama", "m", 8, embed_server.url)
    out = e.embed(["a", "b"])
    assert out.shape == (2, 8) and out.dtype == np.float32
    empty = e.embed([])
    assert empty.shape == (0, 8) and empty.dtype == np.float32 and len(embed_server.requests) == 1


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda texts: [["x"] * 8 for _ in texts], "ollama: non-numeric embedding"),
        (lambda texts: [[float("nan")] * 8 for _ in texts], "ollama: non-finite embedding values"),
        (lambda texts: [1.0 for _ in texts], "ollama/m returned dimension (1,), configured 8"),
        (lambda texts: [[1.0] * 8], "ollama: expected 2 vectors"),
        (lambda texts: "no list", "ollama: expected 2 vectors"),
    ],
)
def test_http_embedder_refuses_a_bad_answer_by_name(
    embed_server: EmbedServer, answer: Any, message: str
) -> None:
    embed_server.vectors = answer
    texts = ["a"] if "dimension (1,)" in message else ["a", "b"]
    with pytest.raises(EmbeddingError) as exc:
        HttpEmbedder("ollama", "m", 8, embed_server.url).embed(texts)
    assert str(exc.value) == message


def test_http_embedder_gives_up_after_its_timeout(embed_server: EmbedServer) -> None:
    """A provider slower than ``timeout`` is a typed failure, not a wait for however long it takes."""
    embed_server.delay = 1.5
    with pytest.raises(EmbeddingError) as exc:
        HttpEmbedder("ollama", "m", 8, embed_server.url, timeout=0.3).embed(["a"])
    assert str(exc.value).startswith("ollama embedding request failed: ")


def test_http_embedder_endpoint_key_and_malformed_answers(
    embed_server: EmbedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trailing slash on the endpoint is dropped; only the openai provider reads OPENAI_API_KEY; an
    answer without the provider's fields is refused by name; an unknown provider names itself."""
    monkeypatch.setenv("OPENAI_API_KEY", "not-for-ollama")
    e = HttpEmbedder("ollama", "m", 8, embed_server.url + "//")
    e.embed(["a"])
    path, _, auth = embed_server.requests[-1]
    assert path == "/api/embed" and auth is None
    embed_server.body = {"unexpected": True}
    for provider in ("ollama", "lmstudio"):
        with pytest.raises(EmbeddingError) as exc:
            HttpEmbedder(provider, "m", 8, embed_server.url).embed(["a"])
        assert str(exc.value) == f"{provider}: malformed embedding response"
    with pytest.raises(ValueError, match="unknown HTTP embedding provider 'cohere'"):
        HttpEmbedder("cohere", "m", 8)


def test_make_embedder_validation() -> None:
    assert isinstance(make_embedder("local", None, None, None), LocalMiniLMEmbedder)
    with pytest.raises(ValueError):
        make_embedder("local", "other-model", None, None)
    with pytest.raises(ValueError):
        make_embedder("local", None, 768, None)
    with pytest.raises(ValueError):
        make_embedder("ollama", None, 768, None)
    with pytest.raises(ValueError):
        make_embedder("cohere", "x", 768, None)
    assert make_embedder("ollama", "nomic-embed-text", None, None).identity.dim == 768


def test_remembered_embeddings_embed_each_text_once_with_the_same_vectors(embed_server: EmbedServer) -> None:
    """Issue #15 item 1: one reconciliation embeds a new memory's text for its close-candidate search
    and again for the commit's index upsert; the remembering wrapper asks the provider once."""
    from tempomem.recall.embedding_types import RememberedEmbeddings, remembered

    inner = make_embedder("ollama", "m", 8, embed_server.url)
    wrapped = remembered(inner)
    assert isinstance(wrapped, RememberedEmbeddings) and wrapped.identity == inner.identity
    np.testing.assert_allclose(wrapped.embed(["a", "b", "a"]), _expected(["a", "b", "a"], 8), atol=1e-6)
    np.testing.assert_allclose(wrapped.embed(["b", "c"]), _expected(["b", "c"], 8), atol=1e-6)
    assert [b["input"] for _, b, _ in embed_server.requests] == [["a", "b"], ["c"]]
    assert wrapped.embed([]).shape == (0, 8)
    assert remembered(None) is None


def test_an_asymmetric_embedder_is_not_remembered() -> None:
    """An embedder with ``embed_query`` (e5: "query: " vs "passage: ") embeds a search differently from a
    stored line, so a remembered query vector would be a wrong stored vector: it is left unwrapped."""
    from tempomem.recall.embedding_types import remembered

    class Asymmetric(LocalMiniLMEmbedder):
        def embed_query(self, text: str) -> np.ndarray:
            return self.embed([f"query: {text}"])[0]

    e = Asymmetric()
    assert remembered(e) is e


def test_vectors_embedded_ahead_are_taken_once_by_the_same_embedder(embed_server: EmbedServer) -> None:
    """A model stage embeds its turn's memories ahead (in parallel with other turns); the reconciliation's
    remembering embedder then takes those vectors instead of asking again — once, and only for the same
    embedder identity."""
    from tempomem.recall.embedding_types import embed_ahead, remembered

    inner = make_embedder("ollama", "m", 8, embed_server.url)
    other = make_embedder("ollama", "other-model", 8, embed_server.url)
    embed_ahead(inner, ["ahead one", "ahead two"])
    np.testing.assert_allclose(
        remembered(other).embed(["ahead one"]), _expected(["ahead one"], 8), atol=1e-6
    )  # another identity: asked
    reconciling = remembered(inner)
    np.testing.assert_allclose(
        reconciling.embed(["ahead one", "new"]), _expected(["ahead one", "new"], 8), atol=1e-6
    )
    reconciling.embed(["ahead one"])  # this reconciliation remembers it
    remembered(inner).embed(["ahead one"])  # taken already: asked again
    asked = [b["input"] for _, b, _ in embed_server.requests]
    assert asked == [["ahead one", "ahead two"], ["ahead one"], ["new"], ["ahead one"]]
