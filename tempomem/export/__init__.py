"""``tempomem export`` and ``tempomem import apply|restore`` (WM-21, CLI-10, CLI-11, AMB-34).

Export is a backup and the one maintenance command allowed on a live store. It is strictly read-only: it
never opens the DuckDB/LanceDB index, takes no lock and creates nothing under the memory root. It reads only
canonical files — ``daily/`` and ``audit/`` day files, ``graph.jsonl``, ``.replay-projection-v1.json`` —
plus content-free intake metadata (ids, states, instants, counters, payload digests; never summaries or
capture text). A consistent snapshot is a pass whose file digests equal the previous pass's; passes repeat
until two agree (AMB-34). The archive is a ``.tar.gz``:

    manifest.json              format, creation instant, and path + sha256 + size of every other member
    canonical/daily/<day>.md   canonical files, byte for byte
    canonical/audit/<day>.md
    canonical/graph.jsonl
    canonical/.replay-projection-v1.json
    canonical/.turn-archive/<day>/<id>.json   archived turn payloads (storage.turn_archive), so a
                               restored store can still be re-curated; they hold turn text, like the
                               Markdown does
    intake-metadata.json       content-free: record views and receipts (informational), and the ledger's
                               commitments (id, payload hash), which import merges into the store's
                               ledger so a restored store never admits a curated run id again

Import needs a stopped agent: it takes the liveness fence (``AgentRunningError`` otherwise) and the store
lock. Both verbs verify the whole archive first — only regular files and directories, no absolute paths,
``..``, links or devices, only canonical names, every digest and size as listed, nothing unlisted — then
stage the new files under ``<root>/.import-staging-<hex>/`` and commit with a journal: a ``COMMIT`` file
naming every staged file and the digest the live file had when staged; renames follow. A crash before
``COMMIT`` leaves the store untouched (the staging folder is discarded later); a crash after it is rolled
forward by ``recover_interrupted_import`` (run by every import, and meant for worker start), which refuses
to overwrite a live file that changed since. So a store is never left half-applied.

* ``restore`` puts the archive's canonical files in place into an empty store, or a *matching* one: every
  canonical file already present equals the archive's (re-running an interrupted restore completes it).
* ``apply`` merges: daily/audit bullets idempotently by id (``storage.markdown.append_bullets``; an id
  already anywhere in the store's folder is kept as is), graph rows via ``storage.graph.apply`` (attesting
  memories unioned) and replay-sidecar entries via ``storage.replay_sidecar.merge`` (a conflicting
  entry refuses the whole import); archived turns the store lacks are added, equal ones kept, and one
  that differs refuses the import. Applying the same archive twice changes nothing the second time.
* Every archived turn must parse as an intake payload named by its own id (sha256 of its run id) in the
  folder of its admission day; anything else refuses the import before anything is staged.

The recall index is not part of the archive: rebuild it from canonical Markdown after an import.

Modules: ``layout`` (the format and the canonical file set), ``write`` (export), ``verify`` (reading an
archive), ``restore`` (both import verbs and the journalled commit).
"""

from tempomem.export.layout import (
    CANONICAL_PREFIX,
    COMMIT_NAME,
    DEFAULT_MAX_PASSES,
    FORMAT,
    FORMAT_VERSION,
    INTAKE_META_NAME,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    MAX_MEMBER_BYTES,
    MAX_MEMBERS,
    MAX_TOTAL_BYTES,
    STAGING_PREFIX,
    ArchiveError,
    ExportUnstableError,
    ImportConflictError,
    ImportRecoveryError,
    is_archived_turn,
    is_canonical,
)
from tempomem.export.restore import (
    ImportReport,
    import_apply,
    import_restore,
    recover_interrupted_import,
)
from tempomem.export.verify import (
    VerifiedArchive,
    verify_archive,
)
from tempomem.export.write import (
    ExportReport,
    Manifest,
    ManifestEntry,
    export_store,
)

__all__ = [
    "CANONICAL_PREFIX",
    "COMMIT_NAME",
    "DEFAULT_MAX_PASSES",
    "FORMAT",
    "FORMAT_VERSION",
    "INTAKE_META_NAME",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "MAX_MEMBERS",
    "MAX_MEMBER_BYTES",
    "MAX_TOTAL_BYTES",
    "STAGING_PREFIX",
    "ArchiveError",
    "ExportReport",
    "ExportUnstableError",
    "ImportConflictError",
    "ImportRecoveryError",
    "ImportReport",
    "Manifest",
    "ManifestEntry",
    "VerifiedArchive",
    "export_store",
    "import_apply",
    "import_restore",
    "is_archived_turn",
    "is_canonical",
    "recover_interrupted_import",
    "verify_archive",
]
