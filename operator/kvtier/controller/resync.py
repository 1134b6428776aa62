"""The period of the operator's periodic resync (controller-runtime's SyncPeriod).

Every tier is reconciled again this often whatever the watches say: what no event reports (a
missed event, a grant kvtier cannot watch, time passing) is acted on, and a converged tier is
checked at least this often; a converged tier costs no write. `kvtier operator
--resync-seconds` (or KVTIER_RESYNC_SECONDS) sets it. A module of its own, without imports,
so the command line names the default without loading the controller.
"""

from __future__ import annotations

RESYNC_SECONDS = 300.0
ENV_RESYNC_SECONDS = "KVTIER_RESYNC_SECONDS"
