"""Whether the answers to a reconcile's writes are what it read plus kvtier's writes and
nothing else: then the decision from them may reuse what the first decision worked out from
the target (contract.Worked) instead of rendering again.

Pure: the controller hands in the facts it decided from, the objects its cache holds after
the writes, the writes made and, for each guarded apply to a target, the resourceVersion it
was sent against and the one it answered with (controller/writer.py). Anything it cannot
vouch for answers False, and the second decision then works everything out again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.policy.contract import Facts
from kvtier.render import DesiredWrite

# Kinds kvtier owns whose objects only the judging steps read (what is still to write, what
# the cluster shows, the probe): writing them changes nothing rendered.
JUDGED_ONLY = frozenset({"PersistentVolume", "PersistentVolumeClaim", "Job", "Deployment"})

ObjectKey = tuple[str, str | None, str]


def answers_are_ours(
    before: Facts,
    tier: Mapping[str, Any],
    target: Mapping[str, Any] | None,
    scheduler_configmaps: Sequence[Mapping[str, Any]],
    llmisvc_configs: Mapping[tuple[str, str], Mapping[str, Any]] | None,
    written: Sequence[DesiredWrite],
    bases: Mapping[ObjectKey, tuple[str, str]],
) -> bool:
    """True when rendering from the objects after `written` would read what `before` held:
    - the tier's spec, status and generation are as read (its finalizer write added nothing);
    - every write to the target was an apply sent against the very resourceVersion the
      decision read, and the target now cached is that apply's answer, in the version it was
      read in. A guarded apply's precondition makes the server vouch that nobody changed it
      in between; for another, a change in between is in the answer, and its own watch event
      wakes the tier again (cache.written_over);
    - every other write went to an object only the judging steps read (JUDGED_ONLY);
    - the scheduler ConfigMaps and LLMInferenceServiceConfigs read again are unchanged."""
    read = before.target
    if read is None or target is None:
        return False
    for key in ("spec", "status"):
        if tier.get(key) != before.tier.get(key):
            return False
    if _meta(tier).get("generation") != _meta(before.tier).get("generation"):
        return False
    wrote_target = False
    for w in written:
        if w.writes_to(read):
            sent_against, answered = bases.get((w.kind, w.namespace, w.name)) or (None, None)
            if w.action != "Apply" or sent_against is None:
                return False
            if sent_against != _meta(read).get("resourceVersion"):
                return False
            if answered != _meta(target).get("resourceVersion"):
                return False
            wrote_target = True
        elif w.kind not in JUDGED_ONLY:
            return False
    if not wrote_target and target is not read:
        return False
    if target.get("apiVersion") != read.get("apiVersion"):  # another version's view
        return False
    return (
        list(scheduler_configmaps) == list(before.scheduler_configmaps)
        and llmisvc_configs == before.llmisvc_configs
    )


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}
