"""``adopt-replay``: metadata-only, trust-on-first-use adoption of replay state (RPL-11..RPL-17, CLI-07).

tempomem never infers a projection from the derived index (RPL-11). When the sidecar is missing, the
only authorities it trusts are the durable capture intents still held by pending intake records: their
retained plans name every supersession and thread edge exactly. Adoption attests those into a fresh
sidecar; the agent must stay stopped (fence) and ``tempomem rebuild`` must follow (RPL-15/17).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from tempomem.capture.commit import plan_edges
from tempomem.capture.plan import RetainedPlan
from tempomem.storage import replay_sidecar
from tempomem.storage.fence import mark_rebuild_required
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import RecordState


class AdoptionReport(BaseModel):
    status: Literal["sidecar_present", "adopted", "nothing_to_adopt"]
    intents: int  # capture intents (retained plans with decisions) attested
    entries: int  # sidecar entries written


def adopt_replay(root: Path) -> AdoptionReport:
    """Call with the liveness fence held. Content-free report: counts only."""
    if replay_sidecar.sidecar_path(root).exists():
        replay_sidecar.load(root)  # a present sidecar must be valid; SidecarError otherwise
        return AdoptionReport(status="sidecar_present", intents=0, entries=0)
    intake = Intake(root)
    delta: list[dict] = []
    intents = 0
    for record_id in intake.list_ids(RecordState.PENDING):
        data = intake.load_plan(record_id)
        if data is None:
            continue
        plan = RetainedPlan.from_bytes(data)
        if plan.decisions is None:
            continue  # no capture intent yet: nothing was decided, nothing to attest
        intents += 1
        delta.extend(plan_edges(record_id, intake.load_payload(record_id), plan))
    if not delta:
        return AdoptionReport(status="nothing_to_adopt", intents=intents, entries=0)
    mark_rebuild_required(root)  # RPL-17: first, so no kill leaves an adopted store a worker may start
    written = replay_sidecar.apply_delta(root, delta)
    return AdoptionReport(status="adopted", intents=intents, entries=written)
