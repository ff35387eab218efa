"""Capture orchestration overhead per turn with a zero-latency scripted model (issue #4 goal ≤ 50 ms/turn
at 20 concurrent turns), beside a bare workflow of four no-op activities in the same run.

Prints figures and ratios; asserts nothing. Usage: python bench/capture.py [--turns 20] [--sequential 8]

It also prints, per step of the sequential turns, the median dispatch time (scheduled → started, through
the dev server) and work time (started → completed) read from the workflow histories.
``BENCH_DEV_ARGS`` passes extra dev-server flags, e.g.
``--dynamic-config-value system.enableActivityEagerExecution=true``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.histories import step_times
from tempomem.devserver import temporal_cli
from tempomem.messages import search_attributes
from tempomem.storage.turn import CompletedTurn
from tests.conftest import make_store, running_worker
from tests.scripted_model import ScriptedModelServer
from tests.test_capture_flow import outcome_of


def _section(content: str, tag: str) -> list:
    body = content.split(f"<{tag}>\n", 1)[1].split(f"\n</{tag}>", 1)[0]
    return json.loads(body)


def zero_latency_model(request: dict) -> str:
    """Answers every stage at once: one owner preference per turn, reviews keep, reconcile adds."""
    user = request["messages"][-1]["content"]
    if "<candidates>" in user:
        count = len(_section(user, "candidates"))
        return json.dumps({"decisions": [{"index": i, "action": "ADD"} for i in range(count)]})
    if "<lines>" in user:
        lines = _section(user, "lines")
        return json.dumps({"decisions": [{"line": x["line"], "decision": "keep"} for x in lines]})
    word = uuid.uuid4().hex[:10]
    return json.dumps(
        {
            "memories": [
                {
                    "text": f"The user prefers the {word} option.",
                    "kind": "preference",
                    "source": "user",
                    "salience": 0.8,
                    "entities": [],
                    "labels": [
                        {"kind": "preference", "scope": "agent", "key": "choice:option", "value": word}
                    ],
                }
            ],
            "entities": [],
            "relations": [],
        }
    )


@activity.defn(name="bench.noop")
async def noop(_: int) -> int:
    return 0


@workflow.defn(name="BenchBare")
class BenchBare:
    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(4):
            await workflow.execute_activity("bench.noop", i, start_to_close_timeout=timedelta(seconds=10))
        return n


async def bare_floor(env: WorkflowEnvironment, runs: int) -> tuple[float, float]:
    # The bare floor runs unsandboxed: this module is a script, not a workflow module.
    async with Worker(
        env.client,
        task_queue="bench-bare",
        workflows=[BenchBare],
        activities=[noop],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        seq = []
        for i in range(runs):
            t = time.perf_counter()
            await env.client.execute_workflow(
                BenchBare.run, i, id=f"bare-{uuid.uuid4()}", task_queue="bench-bare"
            )
            seq.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await asyncio.gather(
            *(
                env.client.execute_workflow(
                    BenchBare.run, i, id=f"bare-{uuid.uuid4()}", task_queue="bench-bare"
                )
                for i in range(20)
            )
        )
        return statistics.median(seq), (time.perf_counter() - t) * 1000 / 20


async def activity_breakdown(client, workflow_ids: list[str]) -> dict[str, tuple[float, float]]:
    """Per activity type, from the capture workflows' histories: median ms from scheduled to started
    (dispatch through the server) and from started to completed (the activity's own work)."""
    waits: dict[str, list[float]] = {}
    runs: dict[str, list[float]] = {}
    for workflow_id in workflow_ids:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        for name, dispatch, work in step_times(history):
            waits.setdefault(name, []).append(dispatch)
            runs.setdefault(name, []).append(work)
    return {k: (statistics.median(waits[k]), statistics.median(runs[k])) for k in runs}


async def capture_run(
    env: WorkflowEnvironment,
    model: ScriptedModelServer,
    root: Path,
    turns: int,
    concurrent: bool,
    breakdown: dict[str, tuple[float, float]] | None = None,
) -> tuple[float, int]:
    client = env.client
    store = make_store(
        root, client, mode="bujo", llm={"provider": "ollama", "model": "bench", "endpoint": model.url}
    )
    base = datetime(2026, 12, 3, tzinfo=UTC)
    made = [
        CompletedTurn(
            run_id=f"bench-{root.name}-{i}",
            conversation_id="bench",
            speaker_kind="human-turn",
            user_text=f"turn {i}",
            final_answer=f"Answer {i}.",
            admitted_at=base + timedelta(seconds=i),
        )
        for i in range(turns)
    ]
    model.push(*([zero_latency_model] * (3 * turns)))  # at most three calls per turn
    calls_before = len(model.calls)
    async with running_worker(client, store):
        t = time.perf_counter()
        if concurrent:
            results = [await store.persist_completed_turn(x) for x in made]
            await asyncio.gather(*(outcome_of(client, r, timeout=300) for r in results))
            per_turn = (time.perf_counter() - t) * 1000 / turns
        else:
            samples, admission, ids = [], [], []
            for x in made:
                s = time.perf_counter()
                r = await store.persist_completed_turn(x)
                admission.append((time.perf_counter() - s) * 1000)
                await outcome_of(client, r, timeout=300)
                samples.append((time.perf_counter() - s) * 1000)
                ids.append(r.workflow_id)
            per_turn = statistics.median(samples)
            if breakdown is not None:
                breakdown["admission (host, then the workflow start)"] = (0.0, statistics.median(admission))
                breakdown.update(await activity_breakdown(client, ids))
    store.close()
    return per_turn, len(model.calls) - calls_before


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--sequential", type=int, default=8)
    args = parser.parse_args()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli()),
        search_attributes=search_attributes.ALL,
        dev_server_log_level="error",
        dev_server_extra_args=os.environ.get("BENCH_DEV_ARGS", "").split(),
    )
    try:
        bare_seq, bare_conc = await bare_floor(env, args.sequential)
        with ScriptedModelServer() as model, tempfile.TemporaryDirectory() as tmp:
            # Warm-up (embedder load, index creation) is not orchestration overhead.
            await capture_run(env, model, Path(tmp) / "warm", 2, concurrent=False)
            breakdown: dict[str, tuple[float, float]] = {}
            seq, seq_calls = await capture_run(
                env, model, Path(tmp) / "seq", args.sequential, concurrent=False, breakdown=breakdown
            )
            conc, conc_calls = await capture_run(env, model, Path(tmp) / "conc", args.turns, concurrent=True)
    finally:
        await env.shutdown()
    print("zero-latency scripted model; BuJo capture: audit projection, extraction, review (skipped when")
    print("nothing is eligible), reconcile (+ one classifier call when lines are close), commit to")
    print("Markdown, graph and index; one store, activities serialised per store (INTAKE-15)")
    print(f"{'case':<32} {'ms/turn':>9} {'bare 4-activity wf':>19} {'ratio':>6} {'model calls':>12}")
    print(
        f"{'1 turn at a time (median)':<32} {seq:>9.1f} {bare_seq:>17.1f}ms {seq / bare_seq:>6.2f} "
        f"{seq_calls:>12}"
    )
    label = f"{args.turns} concurrent (total/turns)"
    print(f"{label:<32} {conc:>9.1f} {bare_conc:>17.1f}ms {conc / bare_conc:>6.2f} {conc_calls:>12}")
    print("\n1 turn at a time, per step (medians over the sequential turns' histories):")
    print(f"{'step':<48} {'dispatch ms':>12} {'work ms':>9}")
    for name, (wait, work) in breakdown.items():
        print(f"{name:<48} {wait:>12.1f} {work:>9.1f}")
    accounted = sum(w + r for w, r in breakdown.values())
    print(f"{'rest: workflow start, workflow tasks, result poll':<48} {seq - accounted:>22.1f}")


if __name__ == "__main__":
    asyncio.run(main())
