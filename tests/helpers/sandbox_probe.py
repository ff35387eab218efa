"""A workflow outside the tempomem package that tries a clock, randomness and a file call (the sandbox
must refuse all three). Imports only temporalio and the standard library, so the sandbox can load it."""

from __future__ import annotations

import datetime
import random
from pathlib import Path

from temporalio import workflow


@workflow.defn(name="SandboxProbe")
class SandboxProbe:
    @workflow.run
    async def run(self) -> list[str]:
        outcomes = []
        for probe in (datetime.datetime.now, random.random, lambda: Path("/").exists()):
            try:
                probe()
                outcomes.append("allowed")
            except Exception as exc:  # the sandbox's RestrictedWorkflowAccessError
                outcomes.append(type(exc).__name__)
        return outcomes
