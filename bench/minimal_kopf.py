"""The framework floor: a minimal kopf operator that marks each KVCacheTier Ready.

On every event of a tier that is not Ready yet it writes one status field (conditions) through
kopf's own patching; nothing else. Run by bench/convergence.py as
``kopf run --standalone --namespace NS bench/minimal_kopf.py`` under the operator's identity.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False  # as kvtier: no Events from log lines
    settings.watching.server_timeout = 600
    settings.scanning.disabled = True  # as kvtier: one namespace, no CRD or namespace scans


@kopf.on.event("kvcache.io", "v1alpha1", "kvcachetiers")
async def mark_ready(event: kopf.RawEvent, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    if event["type"] == "DELETED":
        return
    conditions = (body.get("status") or {}).get("conditions") or []
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch.status["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Bench",
            "message": "minimal kopf operator",
            "lastTransitionTime": now,
            "observedGeneration": body.metadata.get("generation") or 1,
        }
    ]
