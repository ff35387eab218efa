"""The agent-host role: admit each completed turn, then read memory back.

    TEMPORAL_ADDRESS=localhost:7233 python examples/host_and_worker/host.py

Admission returns once the turn is fsynced on local disk; the worker curates it in a Temporal workflow.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client
from temporalio.envconfig import ClientConfig

from tempomem import CompletedTurn, MemoryStore, load_config

# $TEMPOMEM_CONFIG (docker/compose.yaml's agent-host sets it), else the file beside this one.
CONFIG = Path(os.environ.get("TEMPOMEM_CONFIG") or Path(__file__).with_name("tempomem.json"))


async def main() -> None:
    client = await Client.connect(**ClientConfig.load_client_connect_config())
    async with MemoryStore(load_config(CONFIG), client=client) as store:
        result = await store.persist_completed_turn(
            CompletedTurn(
                run_id="example-run-1",  # your provider's run id: admission is idempotent on it
                conversation_id="web:example",
                speaker_kind="human-turn",
                user_text="My relocation budget for Lisbon is 4500 euros.",
                final_answer="Noted: a 4500 euro budget for the move to Lisbon.",
                admitted_at=datetime(2026, 12, 2, 11, 31, tzinfo=UTC),
            )
        )
        print(f"admitted: {result.status} (workflow started: {result.workflow_started})")
        if result.intake_id is not None:
            print(f"curated: {await store.wait_until_curated(result.intake_id)}")

        recalled = await store.recall("what is my relocation budget?")
        print(f"recall: {len(recalled.hits)} hit(s)\n{recalled.text}")
        journal = await store.journal("2026-12-02", "2026-12-02", time_zone="UTC")
        print(f"journal: {len(journal.entries)} entr(y/ies) on 2026-12-02")
        context = await store.automatic_context(
            "How much can I spend on the Lisbon move?", verified_owner=True, surface="web"
        )
        print(f"automatic context: {context.block.byte_size} bytes, {len(context.block.line_ids)} line(s)")


if __name__ == "__main__":
    asyncio.run(main())
