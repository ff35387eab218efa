"""Every workflow start of tempomem, in one place: one turn's capture (from admission and from the
sweeper, AMB-54), a backfill, a re-curation and a consolidation run, with their ids, conflict and reuse
policies, summaries and search attributes.

A start for a run that already has a running workflow is a no-op (id conflict policy USE_EXISTING); a
finished one may be started again (reuse policy ALLOW_DUPLICATE): for a capture only a still-pending
record is ever started (e.g. after ``tempomem retry``), and a batch run started again finds every turn
a duplicate. Nothing here is loaded until something starts a workflow, so admission and the CLI's
parser stay light.
"""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.service import RPCError, RPCStatusCode

from tempomem.backfill import BACKFILL_WINDOW_DEFAULT, detect_format, follow_backfill
from tempomem.messages import search_attributes as sa
from tempomem.messages.backfill import (
    BACKFILL_WORKFLOW,
    BackfillInput,
    BackfillProgress,
    BackfillSource,
    backfill_workflow_id,
)
from tempomem.messages.capture import (
    CAPTURE_WORKFLOW,
    CaptureInput,
    capture_workflow_id,
    legacy_capture_workflow_id,
)
from tempomem.messages.consolidation import (
    CONSOLIDATION_WORKFLOW,
    ConsolidationInput,
    ConsolidationResult,
    consolidation_workflow_id,
)
from tempomem.messages.recurate import (
    RECURATE_WORKFLOW,
    RecurateInput,
    RecurateProgress,
    recurate_workflow_id,
)
from tempomem.recurate import RECURATE_BATCH_DEFAULT, RECURATE_WINDOW_DEFAULT

if TYPE_CHECKING:
    from collections.abc import Callable

    from temporalio.client import WorkflowHandle

    from tempomem.recurate import RecurateRequest
    from tempomem.store import MemoryStore


# -- one turn's capture ---------------------------------------------------------------------------------
async def start_capture(
    client: Client,
    *,
    task_queue: str,
    store_id: str,
    intake_id: str,
    tier: str,
    write_mode: str,
    first_delay_seconds: int = 60,
    path_named: bool = False,
) -> bool:
    """Start (or find) the CaptureWorkflow of one record. True when this call started a new run.

    ``path_named``: the store kept its pre-id name, so a capture started before the change may still be
    open under the old id form; then nothing new is started while it is (one capture per record).

    Search attributes need registering on the namespace (the worker tries on start); where they are
    not registered the start is retried without them, so a plain cluster still works.
    """
    if path_named and await _open(client, legacy_capture_workflow_id(intake_id)):
        return False
    summary = f"capture {intake_id[:12]}… · {tier} · {write_mode} · store {store_id}"
    with_attributes = await search_attributes_registered(client)
    handle = await client.start_workflow(
        CAPTURE_WORKFLOW,
        CaptureInput(
            intake_id=intake_id,
            store_id=store_id,
            first_delay_seconds=first_delay_seconds,
            search_attributes=with_attributes,
        ),
        id=capture_workflow_id(store_id, intake_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        static_summary=summary,
        static_details="Content-free by design: memory text stays in the intake record on disk.",
        search_attributes=initial_attributes(store_id, tier, write_mode) if with_attributes else None,
    )
    # The server says whether it started a run or USE_EXISTING found one.
    response = getattr(handle, "_start_workflow_response", None)
    return bool(getattr(response, "started", True))


async def _open(client: Client, workflow_id: str) -> bool:
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return described.status == WorkflowExecutionStatus.RUNNING


# Per client object (weakly held, so a new client never inherits another server's answer) and namespace.
_REGISTERED: weakref.WeakKeyDictionary[Client, dict[str, bool]] = weakref.WeakKeyDictionary()


async def search_attributes_registered(client: Client) -> bool:
    """Whether the namespace knows every Tempomem* attribute (asked once per client and namespace).

    A server without the operator service (e.g. the time-skipping test server) counts as "no", and
    workflows then start without search attributes rather than fail on an unknown one.
    """
    known = _REGISTERED.setdefault(client, {})
    if client.namespace not in known:
        try:
            response = await client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=client.namespace)
            )
            known[client.namespace] = all(k.name in response.custom_attributes for k in sa.ALL)
        except RPCError:
            known[client.namespace] = False
    return known[client.namespace]


def _store_pairs(store_id: str, tier: str, write_mode: str) -> list[SearchAttributePair]:
    return [
        SearchAttributePair(sa.STORE_ID, store_id),
        SearchAttributePair(sa.TIER, tier),
        SearchAttributePair(sa.WRITE_MODE, write_mode),
    ]


async def batch_attributes(
    client: Client, store_id: str, tier: str, write_mode: str
) -> TypedSearchAttributes | None:
    """What a backfill or re-curation starts with, so the UI lists one store's batch runs (#16 item 4);
    None when the namespace lacks the attributes."""
    if not await search_attributes_registered(client):
        return None
    return TypedSearchAttributes(_store_pairs(store_id, tier, write_mode))


def initial_attributes(store_id: str, tier: str, write_mode: str) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [
            *_store_pairs(store_id, tier, write_mode),
            SearchAttributePair(sa.STATE, "pending"),
            SearchAttributePair(sa.ATTEMPT, 0),
        ]
    )


async def register_search_attributes(client: Client) -> bool:
    """Register the Tempomem* attributes on the client's namespace. False when not permitted here.

    Once this client has seen them all registered it does not ask again: a process serving many stores
    calls this for each (issue #16), and a thousand identical requests would only spend the namespace's
    request rate."""
    if _REGISTERED.get(client, {}).get(client.namespace):
        return True
    types = {str: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD, int: IndexedValueType.INDEXED_VALUE_TYPE_INT}
    request = AddSearchAttributesRequest(
        namespace=client.namespace,
        search_attributes={key.name: types[key.origin_value_type] for key in sa.ALL},
    )
    try:
        await client.operator_service.add_search_attributes(request)
    except RPCError as exc:
        if exc.status is not RPCStatusCode.ALREADY_EXISTS:
            return False
    _REGISTERED.get(client, {}).pop(client.namespace, None)  # ask again
    return await search_attributes_registered(client)


# -- batch runs -------------------------------------------------------------------------------------
async def start_backfill(
    client: Client,
    store: MemoryStore,
    path: Path | str,
    *,
    format: str = "auto",
    window: int = BACKFILL_WINDOW_DEFAULT,
    batch_size: int = 64,
    continue_as_new_every: int = 500,
    poll_seconds: int = 2,
) -> WorkflowHandle[Any, BackfillProgress]:
    """Start (or re-attach to) the backfill of ``path`` into ``store``; its worker does the work.

    The workflow id is ``backfill-<store id>-<sha256 of the file>``: a second start while it runs returns
    the running one; a start after it finished runs it again (everything comes back ``duplicate``).
    """

    from tempomem.activities.backfill import file_digest  # the activity layer loads on a backfill only

    source_path = Path(path).expanduser().resolve(strict=True)
    fmt = detect_format(source_path, format)
    digest = await asyncio.to_thread(file_digest, source_path)
    memory = store.config.memory
    attributes = await batch_attributes(client, store.store_id, memory.mode, memory.write_mode)
    inp = BackfillInput(
        store_id=store.store_id,
        source=BackfillSource(path=str(source_path), digest=digest, format=fmt),
        window=window,
        batch_size=batch_size,
        continue_as_new_every=continue_as_new_every,
        first_delay_seconds=store.first_delay_seconds,
        poll_seconds=poll_seconds,
        search_attributes=attributes is not None,
    )
    return await client.start_workflow(
        BACKFILL_WORKFLOW,
        inp,
        id=backfill_workflow_id(store.store_id, digest),
        task_queue=store.task_queue,
        result_type=BackfillProgress,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=attributes,
        static_summary=f"backfill {source_path.name} · {fmt} · {digest[:12]}… · store {store.store_id}",
        static_details=(
            "Content-free: the file stays on the worker host; counts are in the current details and the "
            "`progress` query."
        ),
    )


async def run_backfill(
    client: Client,
    store: MemoryStore,
    path: Path | str,
    *,
    on_progress: Callable[[BackfillProgress], None] | None = None,
    poll_interval: float = 0.5,
    **knobs: Any,
) -> BackfillProgress:
    """``start_backfill`` then ``follow_backfill``: the whole backfill, as the CLI runs it."""
    handle = await start_backfill(client, store, path, **knobs)
    return await follow_backfill(client, handle.id, on_progress=on_progress, poll_interval=poll_interval)


async def consolidate_now(client: Client, store: MemoryStore) -> ConsolidationResult:
    """Run ``ConsolidationWorkflow`` once on the store's worker and return its content-free result."""
    return await client.execute_workflow(
        CONSOLIDATION_WORKFLOW,
        ConsolidationInput(store_id=store.store_id),
        id=consolidation_workflow_id(store.store_id),
        task_queue=store.task_queue,
        result_type=ConsolidationResult,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"regenerate index.md · store {store.store_id}",
    )


async def start_recurate(
    client: Client,
    store: MemoryStore,
    req: RecurateRequest,
    *,
    batch_size: int = RECURATE_BATCH_DEFAULT,
    window: int = RECURATE_WINDOW_DEFAULT,
) -> WorkflowHandle[Any, RecurateProgress]:
    """Start (or re-attach to) the re-curation ``req.run_id`` of ``store``; its worker does the work.

    ``window`` captures run at once (their model calls overlap up to ``memory.llm.concurrency``); the
    commits stay in admission order whatever it is."""
    memory = store.config.memory
    attributes = await batch_attributes(client, store.store_id, memory.mode, memory.write_mode)
    inp = RecurateInput(
        store_id=store.store_id,
        run_id=req.run_id,
        since=req.since.isoformat(),
        until=req.until.isoformat() if req.until else None,
        model=req.model,
        dry_run=req.dry_run,
        batch_size=batch_size,
        window=window,
        first_delay_seconds=store.first_delay_seconds,
        search_attributes=attributes is not None,
    )
    return await client.start_workflow(
        RECURATE_WORKFLOW,
        inp,
        id=recurate_workflow_id(store.store_id, req.run_id, dry_run=req.dry_run),
        task_queue=store.task_queue,
        result_type=RecurateProgress,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=attributes,
        static_summary=(
            f"recurate {req.run_id}{' (dry run)' if req.dry_run else ''} · {inp.since} .. "
            f"{inp.until or 'now'} · model {req.model or 'configured'} · store {store.store_id}"
        ),
        static_details="Content-free: archived turns and the diff stay on the worker host.",
    )


async def run_recurate(
    client: Client, store: MemoryStore, req: RecurateRequest, **knobs: Any
) -> RecurateProgress:
    """Start the re-curation and wait for its content-free result."""
    handle = await start_recurate(client, store, req, **knobs)
    return await handle.result()
