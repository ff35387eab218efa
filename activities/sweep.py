"""Starting capture workflows idempotently, from admission and from the intake sweeper (AMB-54).

A start for a run that already has a running workflow is a no-op (id conflict policy USE_EXISTING);
a finished one may be started again (reuse policy ALLOW_DUPLICATE) because only a still-pending record
is ever started, e.g. after ``tempomem retry``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from temporalio import activity
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from tempomem.activities.context import StoreContext, utc_now
from tempomem.messages import search_attributes as sa
from tempomem.messages.capture import (
    CAPTURE_WORKFLOW,
    SWEEP,
    CaptureInput,
    SweepInput,
    SweepResult,
    capture_workflow_id,
    legacy_capture_workflow_id,
)
from tempomem.storage.store_ref import is_path_named

log = logging.getLogger("tempomem.capture")


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
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError, RPCStatusCode

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


async def sweep_store(ctx: StoreContext) -> SweepResult:
    """Start a workflow for every due pending record of this store."""
    if ctx.client is None:
        raise RuntimeError("the sweeper needs a Temporal client")
    due = ctx.intake.due_pending(now=utc_now())
    started = 0
    for intake_id in due:
        if await start_capture(
            ctx.client,
            task_queue=ctx.task_queue,
            store_id=ctx.store_id,
            intake_id=intake_id,
            tier=ctx.tier,
            write_mode=ctx.write_mode,
            first_delay_seconds=ctx.first_delay_seconds,
            path_named=is_path_named(ctx.root, ctx.store_id),
        ):
            started += 1
    return SweepResult(
        due=len(due), started=started, already_running=len(due) - started, indexed=await _index_backlog(ctx)
    )


async def _index_backlog(ctx: StoreContext) -> int:
    """Index the days a batch run's group commit left marked (it crashed, or was abandoned): at the
    worker's start and at every scheduled sweep. A failure is logged (content-free) and left for the
    next sweep."""
    if not ctx.index_backlog.marked_days():
        return 0
    from tempomem.activities.projection import ProjectionActivities

    try:
        return await asyncio.to_thread(ProjectionActivities(ctx).flush_now)
    except ApplicationError as err:
        log.warning("index backlog not flushed: %s", err.type)
        return 0


class SweepActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    @activity.defn(name=SWEEP)
    async def sweep(self, inp: SweepInput) -> SweepResult:
        self.ctx.check(inp.store_id)
        return await sweep_store(self.ctx)
