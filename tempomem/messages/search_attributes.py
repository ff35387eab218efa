"""Content-free search attributes that make capture workflows filterable in the Temporal Web UI."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

STORE_ID = SearchAttributeKey.for_keyword("TempomemStoreId")
TIER = SearchAttributeKey.for_keyword("TempomemTier")
WRITE_MODE = SearchAttributeKey.for_keyword("TempomemWriteMode")
STATE = SearchAttributeKey.for_keyword("TempomemState")
ATTEMPT = SearchAttributeKey.for_int("TempomemAttempt")

ALL = (STORE_ID, TIER, WRITE_MODE, STATE, ATTEMPT)
