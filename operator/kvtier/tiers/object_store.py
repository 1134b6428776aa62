"""The ObjectStore tier: an S3 bucket (RGW, any S3 endpoint) that vLLM's obj tier writes to.

There is nothing to provision and nothing to evict: the bucket is the user's. Its keys reach
vLLM by reference only, as env from the user's Secret (targets/pod.py), and kvtier never
reads that Secret; the bucket and endpoint go in the tier's store_config
(kvtier.sizing.vllm.ObjectStore).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import KVCacheTierSpec
from kvtier.names.labels import TierRef
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingPlan
from kvtier.tiers.base import ProbeVolume, Provision, TierRequest


class ObjectStore:
    """A bucket all replicas share; only when the policy allows it and the tier accepts its
    tail latency."""

    name = "ObjectStore"
    status_name = "objectstore"
    vllm_type: str | None = "obj"
    shared = True
    evicted = False

    def available(
        self,
        spec: KVCacheTierSpec,
        settings: EffectiveSettings,
        nodes: Sequence[Mapping[str, Any]],
        eligible: Set[str],
    ) -> bool:
        """Allowed by the policy and acknowledged by the tier (its p99 lands in TTFT)."""
        store = spec.disk.object_store if spec.disk else None
        acknowledged = bool(store and store.acknowledge_tail_latency)
        return bool(settings.object_store_allowed.value and acknowledged)

    def provision(self, request: TierRequest) -> Provision:
        """A bucket: nothing to provision. The keys reach vLLM by reference only."""
        disk_spec, sizing = request.spec.disk, request.sizing
        store = disk_spec.object_store if disk_spec else None
        ref = store.credentials_secret_ref if store else None
        secret = ref.name if ref else None
        if secret is None and sizing.release.object_store_keys_in_config:
            raise RenderError(
                "ObjectStoreCredentialsRequired",
                f"spec.disk.objectStore.credentialsSecretRef: vLLM {sizing.release.series}'s "
                "obj tier requires access keys; name the Secret that holds AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY",
            )
        note = (
            f"obj tier: keys from Secret {secret} by reference (env valueFrom); "
            "kvtier never reads it"
            if secret
            else "obj tier: no credentials Secret; vLLM's AWS SDK uses its default chain "
            "(e.g. a workload identity)"
        )
        return Provision(notes=(note,), credentials_secret=secret)

    def policy_writes(
        self, policy: KVCachePolicySpec | None, settings: EffectiveSettings
    ) -> list[DesiredWrite]:
        return []

    def probe_volume(
        self,
        request: TierRequest,
        writes: Sequence[DesiredWrite],
        disk_status: Mapping[str, Any],
    ) -> ProbeVolume | None:
        """fio measures a file system; a bucket's p99 comes from the user's own probe."""
        return None

    def evictor_pods(self, tier: TierRef, target: str, claim: str | None) -> str | None:
        return None

    def status_text(self, sizing: SizingPlan, settings: EffectiveSettings, capacity: object) -> str:
        return self.name


OBJECT_STORE = ObjectStore()
