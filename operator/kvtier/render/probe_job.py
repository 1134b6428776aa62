"""The storage-probe Job: `kvtier probe` on a tier's volume, and the reading of its result.

The Job runs the operator's own image against the same volume the model server gets (what
the tier type's `probe_volume` names, kvtier.tiers: the tier's per-pod NVMe claim on a node
of the pool, or the shared CephFS claim), so the probe measures what serving will see. Its
one-line JSON result comes back as the container's termination message;
`parse_termination_message` turns that into the status `probe` block.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from kvtier.api.tier import ProbeResult
from kvtier.names.labels import PROBE_TIER, TierRef, owner_references, tier_labels
from kvtier.names.objects import KV_CACHE_VOLUME, PREFIX, short_hash
from kvtier.tiers.base import ProbeVolume

MOUNT_PATH = "/mnt/kv-cache"  # where vLLM's fs tier lives in the model-server pod too
TERMINATION_LOG = "/dev/termination-log"
CONTAINER = "probe"
TMP_VOLUME = "tmp"
# fio lays out numjobs files (up to 16 GiB) before its timed run; at CephFS's ~205 MB/s that
# alone takes ~80 s, plus scheduling and image pull.
DEADLINE_MARGIN_SECONDS = 600
TTL_SECONDS_AFTER_FINISHED = 3600
# fio's buffers are numjobs × block size (16 × 5 MiB for Llama 3.1 70B) plus the Python CLI.
RESOURCES = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}
_STATUS_KEYS = frozenset(f.alias or name for name, f in ProbeResult.model_fields.items())
_REQUIRED = ("p99Seconds", "bandwidthBytesPerSecond", "measuredAt")


class ProbeMessageError(ValueError):
    """A termination message that is no probe result: the probe failed, or garbage."""


def probe_job_name(tier: TierRef, disk: str, generation: int, attempt: int = 0) -> str:
    """Deterministic per (tier, disk, generation, attempt): re-running a reconcile finds the
    same Job; a new generation or a retry gets a new one. Always a DNS label."""
    return f"{PREFIX}-probe-{short_hash(tier.namespace, tier.name, disk)}-{generation}-{attempt}"


def probe_job(
    tier: TierRef,
    volume: ProbeVolume,
    *,
    image: str,
    block_bytes: int,
    runtime_seconds: int,
    generation: int,
    attempt: int = 0,
    numjobs: int | None = None,
    allow_buffered: bool = False,
    tolerations: Sequence[Mapping[str, Any]] = (),
    deadline_margin_seconds: int = DEADLINE_MARGIN_SECONDS,
    ttl_seconds_after_finished: int = TTL_SECONDS_AFTER_FINISHED,
) -> dict[str, Any]:
    """The batch/v1 Job that probes one tier's volume, owned by its KVCacheTier."""
    if tier.uid is None:
        raise ValueError("a probe Job needs the KVCacheTier's uid for its owner reference")
    labels = {**tier_labels(tier), PROBE_TIER: tier.id}
    command = [
        "kvtier",
        "probe",
        "--dir",
        MOUNT_PATH,
        "--block-bytes",
        str(block_bytes),
        "--runtime",
        str(runtime_seconds),
        "--termination-log",
        TERMINATION_LOG,
        "--output",
        "json",
    ]
    if numjobs is not None:
        command += ["--numjobs", str(numjobs)]
    if allow_buffered:
        command.append("--allow-buffered")
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,  # the probe never talks to the API
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "command": command,
                "env": [{"name": "TMPDIR", "value": "/tmp"}],
                "resources": RESOURCES,
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "terminationMessagePath": TERMINATION_LOG,
                # A crash before the result is written still leaves its last log lines.
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [
                    {"name": KV_CACHE_VOLUME, "mountPath": MOUNT_PATH},
                    {"name": TMP_VOLUME, "mountPath": "/tmp"},
                ],
            }
        ],
        "volumes": [
            volume.claim.volume(KV_CACHE_VOLUME, labels),
            {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}},
        ],
    }
    if volume.node_selector:
        pod_spec["nodeSelector"] = dict(volume.node_selector)
    if tolerations:
        pod_spec["tolerations"] = [dict(t) for t in tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": probe_job_name(tier, volume.disk, generation, attempt),
            "namespace": tier.namespace,
            "labels": labels,
            "ownerReferences": owner_references(tier),
        },
        "spec": {
            "backoffLimit": 0,  # a failed probe is reported, not retried blindly
            "activeDeadlineSeconds": runtime_seconds + deadline_margin_seconds,
            "ttlSecondsAfterFinished": ttl_seconds_after_finished,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def parse_termination_message(text: str) -> dict[str, Any]:
    """The status `probe` block (ProbeResult, camelCase) from a probe container's message.

    Raises ProbeMessageError with one line to put in a condition: the probe's own error
    (`{"error": ...}` or, via FallbackToLogsOnError, its last log line) or what is wrong.
    """
    stripped = text.strip()
    if not stripped:
        raise ProbeMessageError("the probe left no termination message")
    try:
        document = json.loads(stripped)
    except ValueError:
        last = stripped.splitlines()[-1].strip()
        raise ProbeMessageError(f"probe failed: {last[:500]}") from None
    if not isinstance(document, dict):
        raise ProbeMessageError("probe result is not a JSON object")
    if "error" in document:
        raise ProbeMessageError(f"probe failed: {str(document['error'])[:500]}")
    missing = [key for key in _REQUIRED if document.get(key) is None]
    if missing:
        raise ProbeMessageError(f"probe result lacks {', '.join(missing)}")
    try:
        result = ProbeResult.model_validate(
            {k: v for k, v in document.items() if k in _STATUS_KEYS}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProbeMessageError(f"probe result: {where}: {first['msg']}") from None
    return result.to_k8s()
