"""The restricted Pod Security Standard as a pure check, and the pod KServe would run for an
LLMInferenceService: shared by the unit tests (rendered objects, no cluster) and the e2e
tests, where kube-apiserver's PodSecurity admission is the judge.

`restricted_violations` follows the Pod Security Standards, `restricted` at version
`latest` (every baseline rule plus the restricted ones), for a pod spec:
https://kubernetes.io/docs/concepts/security/pod-security-standards/
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

# restricted: the only volume sources allowed.
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
SECCOMP_OK = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_OK = frozenset({"RuntimeDefault", "Localhost"})


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _selinux(where: str, options: Mapping[str, Any] | None) -> list[str]:
    if not options:
        return []
    bad = []
    if options.get("type", "") not in SELINUX_TYPES:
        bad.append(f"{where}: seLinuxOptions.type {options['type']}")
    for key in ("user", "role"):
        if options.get(key):
            bad.append(f"{where}: seLinuxOptions.{key} set")
    return bad


def restricted_violations(
    spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None
) -> list[str]:
    """Every rule of the restricted level (latest) the pod spec breaks; [] when it passes."""
    bad: list[str] = []
    psc: Mapping[str, Any] = spec.get("securityContext") or {}
    # --- baseline ---
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            bad.append(f"{key} is true")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        bad.append("pod windowsOptions.hostProcess")
    bad += _selinux("pod", psc.get("seLinuxOptions"))
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp == "Unconfined":
        bad.append("pod seccompProfile Unconfined")
    pod_apparmor = (psc.get("appArmorProfile") or {}).get("type")
    if pod_apparmor is not None and pod_apparmor not in APPARMOR_OK:
        bad.append(f"pod appArmorProfile {pod_apparmor}")
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            bad.append(f"unsafe sysctl {sysctl.get('name')}")
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            bad.append(f"AppArmor annotation {key}={value}")
    # --- restricted: pod level ---
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            bad.append(f"volume {volume.get('name')} uses {sorted(kinds - RESTRICTED_VOLUMES)}")
    if psc.get("runAsUser") == 0:
        bad.append("pod runAsUser 0")
    containers = list(_containers(spec))
    if not containers:
        bad.append("no containers")
    for c in containers:
        sc: Mapping[str, Any] = c.get("securityContext") or {}
        where = f"container {c.get('name')}"
        # --- baseline ---
        if sc.get("privileged"):
            bad.append(f"{where}: privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            bad.append(f"{where}: windowsOptions.hostProcess")
        caps: Mapping[str, Any] = sc.get("capabilities") or {}
        added = set(caps.get("add") or [])
        if added - BASELINE_CAPABILITIES:
            bad.append(f"{where}: adds {sorted(added - BASELINE_CAPABILITIES)}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            bad.append(f"{where}: hostPort")
        bad += _selinux(where, sc.get("seLinuxOptions"))
        if sc.get("procMount", "Default") != "Default":
            bad.append(f"{where}: procMount {sc['procMount']}")
        apparmor = (sc.get("appArmorProfile") or {}).get("type")
        if apparmor is not None and apparmor not in APPARMOR_OK:
            bad.append(f"{where}: appArmorProfile {apparmor}")
        # --- restricted ---
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{where}: allowPrivilegeEscalation is not false")
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if non_root is not True:
            bad.append(f"{where}: runAsNonRoot is not true")
        if sc.get("runAsUser") == 0:
            bad.append(f"{where}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in SECCOMP_OK:
            bad.append(f"{where}: seccompProfile {seccomp}")
        if "ALL" not in (caps.get("drop") or []):
            bad.append(f"{where}: capabilities do not drop ALL")
        if added - {"NET_BIND_SERVICE"}:
            bad.append(f"{where}: adds capabilities besides NET_BIND_SERVICE")
    return bad


# --- the pod a (patched) LLMInferenceService runs -----------------------------------------------

_MERGE_KEYS = {"containers": "name", "volumes": "name", "env": "name", "volumeMounts": "mountPath"}


def merge(base: Any, patch: Any, key: str | None = None) -> Any:
    """`patch` applied over `base` the way server-side apply merges kvtier's fields: maps
    field by field, lists of containers, volumes, env and mounts by their key, every other
    list (args) whole."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = dict(copy.deepcopy(base))
        for k, v in patch.items():
            out[k] = merge(out[k], v, k) if k in out else copy.deepcopy(v)
        return out
    merge_key = _MERGE_KEYS.get(key or "")
    if merge_key and isinstance(base, Sequence) and isinstance(patch, Sequence):
        items = [copy.deepcopy(i) for i in base]
        index = {i.get(merge_key): n for n, i in enumerate(items)}
        for item in patch:
            at = index.get(item.get(merge_key))
            if at is None:
                items.append(copy.deepcopy(item))
            else:
                items[at] = merge(items[at], item)
        return items
    return copy.deepcopy(patch)


def _parts(pointer: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]


def json_patch(doc: Any, ops: Sequence[Mapping[str, Any]]) -> Any:
    """RFC 6902 add/replace/remove/test on plain JSON values (what kvtier's Patch writes use);
    a failed `test` raises, as kube-apiserver would refuse the patch."""
    out = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _parts(str(op["path"])) or [""]
        holder = out
        for part in parents:
            holder = holder[int(part)] if isinstance(holder, list) else holder[part]
        kind = op["op"]
        if kind == "test":
            current = (
                out
                if op["path"] == ""
                else (holder[int(last)] if isinstance(holder, list) else holder.get(last))
            )
            if current != op["value"]:
                raise AssertionError(f"JSON patch test failed at {op['path']}")
        elif kind in ("add", "replace"):
            if isinstance(holder, list):
                index = len(holder) if last == "-" else int(last)
                if kind == "add":
                    holder.insert(index, copy.deepcopy(op["value"]))
                else:
                    holder[index] = copy.deepcopy(op["value"])
            else:
                holder[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del holder[int(last) if isinstance(holder, list) else last]
        else:
            raise ValueError(f"unsupported JSON patch op {kind}")
    return out


def apply_writes(target: Mapping[str, Any], writes: Any) -> dict[str, Any]:
    """The target after kvtier's writes (one DesiredWrite or a list): Apply bodies merged as
    server-side apply does, Patch writes' JSON patches applied in order."""
    out = copy.deepcopy(dict(target))
    for write in writes if isinstance(writes, list) else [writes]:
        if write.action == "Apply":
            out = merge(out, write.body)
        elif write.action == "Patch":
            out = json_patch(out, write.body["jsonPatch"])
        else:
            raise ValueError(f"kvtier would {write.action} a model server")
    return out


def pod_from_target(target: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Play KServe: the pod a (patched) LLMInferenceService runs, its securityContext exactly
    as the target carries it, nothing added. (An InferenceService's pod is KServe's own: its
    controller on the e2e cluster, or tests/kserve_runtime_oracle.py.)"""
    spec = target["spec"]
    pod_spec = copy.deepcopy(spec["template"])
    # v1alpha2's native offload field: KServe mounts each secondary tier's claim.
    offload = spec.get("kvCacheOffloading") or {}
    for i, tier in enumerate(offload.get("secondary") or []):
        pvc = tier["fileSystem"]["pvc"]
        volume: dict[str, Any] = {"name": f"kv-cache-secondary-{i}"}  # KServe's name
        if "spec" in pvc:
            volume["ephemeral"] = {"volumeClaimTemplate": {"spec": pvc["spec"]}}
        else:
            volume["persistentVolumeClaim"] = {"claimName": pvc["ref"]["name"]}
        pod_spec.setdefault("volumes", []).append(volume)
        pod_spec["containers"][0].setdefault("volumeMounts", []).append(
            {"name": volume["name"], "mountPath": f"/mnt/kv-cache-{i}"}
        )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec}


# What a model owner in a restricted namespace writes into their model server.
USER_POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
USER_CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def restricted_target(target: Mapping[str, Any]) -> dict[str, Any]:
    """The user's model-server manifest with the securityContext a restricted user writes."""
    out = copy.deepcopy(dict(target))
    if out["kind"] == "InferenceService":
        holder, containers = out["spec"]["predictor"], [out["spec"]["predictor"]["model"]]
    else:
        holder = out["spec"]["template"]
        containers = holder["containers"]
    holder["securityContext"] = copy.deepcopy(USER_POD_SECURITY)
    for container in containers:
        container["securityContext"] = copy.deepcopy(USER_CONTAINER_SECURITY)
    return out
