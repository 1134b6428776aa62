"""The upstream CRDs as an API server stores them, so that a new control plane serves them
at once.

Creating KServe's, Rook's and LeaderWorkerSet's CRDs (8 MB of schemas) costs an API server
about 17 CPU-seconds: the server-side apply of each object, then the status writes of its CRD
controllers, each re-encoding and re-diffing the whole object; kubectl's polls for Established
add a few more. Every control plane of the test suite paid that. Here it is paid once per
variant: a capture cluster applies the variant's files with kubectl as before, and the objects
its API server then holds in etcd (Established, with kubectl's field ownership) are kept in
the cache. A new cluster gets those values written into its etcd, as a restored backup would
put them, and its API server serves them as it does after a restart (about 2 CPU-seconds).
The key is the files' bytes and the API server's version: a change of either captures again.

Only the upstream CRDs are kept so: kvtier's own are installed through the API every time,
since how they are created (validation, CEL compilation) is what tests check.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = b"/registry/apiextensions.k8s.io/customresourcedefinitions/"
# The end of the prefix's key range (etcd's range_end: the prefix with its last byte + 1).
PREFIX_END = PREFIX[:-1] + bytes([PREFIX[-1] + 1])
# Written into the cached file, so that an old file of another layout is captured again.
LAYOUT = 1


@dataclass(frozen=True)
class Served:
    """A resource a stored CRD serves: what discovery lists once the API server has it."""

    group: str
    version: str
    plural: str


@dataclass(frozen=True)
class Stored:
    """A variant's CRDs as etcd holds them: (key, value) pairs, base64 as etcd's JSON API
    speaks them."""

    objects: tuple[tuple[str, str], ...]

    def served(self) -> list[Served]:
        return served_by(json.loads(base64.b64decode(value)) for _, value in self.objects)

    def not_established(self) -> list[str]:
        """The CRDs whose stored status does not say Established: a capture must not keep
        them (a cluster would serve them only once its own controllers caught up)."""
        out = []
        for _, value in self.objects:
            crd = json.loads(base64.b64decode(value))
            conditions = (crd.get("status") or {}).get("conditions") or []
            if not any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            ):
                out.append(str(crd["metadata"]["name"]))
        return out

    def to_json(self, key: str) -> str:
        return json.dumps({"layout": LAYOUT, "key": key, "objects": self.objects})


def served_by(crds: Iterable[Mapping[str, Any]]) -> list[Served]:
    """The resources these CRD objects serve, one per served version."""
    out = []
    for crd in crds:
        spec = crd["spec"]
        versions = spec.get("versions") or [{"name": spec.get("version"), "served": True}]
        out += [
            Served(spec["group"], v["name"], spec["names"]["plural"])
            for v in versions
            if v.get("served")
        ]
    return out


def unserved(
    resources: Iterable[Served], get: Callable[[str], Mapping[str, Any] | None]
) -> list[Served]:
    """Those of `resources` a client cannot use yet: not listed by discovery
    (`/apis/<group>/<version>`), or not described by `/openapi/v3/apis/<group>/<version>`.
    The API server's OpenAPI controller publishes a CRD's schema a moment after discovery
    lists it (one CRD at a time; a group version appears in the index with its first CRD),
    and a client that reads schemas before applying, as the operator does, finds none in
    that moment. `get` returns a path's JSON, or None when it is not there (yet)."""
    by_gv: dict[tuple[str, str], list[Served]] = {}
    for r in resources:
        by_gv.setdefault((r.group, r.version), []).append(r)
    missing: list[Served] = []
    for (group, version), wanted in by_gv.items():
        discovery = get(f"/apis/{group}/{version}") or {}
        listed = {str(r.get("name")) for r in discovery.get("resources") or []}
        spec = (get(f"/openapi/v3/apis/{group}/{version}") if listed else None) or {}
        # A resource's paths end in its plural, or in its plural then {name}, /status, ...
        segments = {part for path in spec.get("paths") or {} for part in path.split("/")}
        missing += [r for r in wanted if r.plural not in listed or r.plural not in segments]
    return missing


def capture_key(files: Iterable[Path], apiserver_version: str) -> str:
    """What a capture depends on: each file's name and bytes, and the API server's version
    (its storage version and defaults decide the stored form)."""
    digest = hashlib.sha256(f"layout={LAYOUT} {apiserver_version}\n".encode())
    for path in sorted(files):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def crd_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


def cache_file(directory: Path, key: str) -> Path:
    return directory.parent / "stored" / f"{directory.name}-{key[:16]}.json"


def load(directory: Path, apiserver_version: str) -> Stored | None:
    """The capture of the CRDs in `directory` for this API server, when one is cached."""
    key = capture_key(crd_files(directory), apiserver_version)
    try:
        found = json.loads(cache_file(directory, key).read_text())
    except (OSError, ValueError):
        return None
    if found.get("layout") != LAYOUT or found.get("key") != key or not found.get("objects"):
        return None
    return Stored(tuple((str(k), str(v)) for k, v in found["objects"]))


def save(directory: Path, apiserver_version: str, stored: Stored) -> Path:
    key = capture_key(crd_files(directory), apiserver_version)
    path = cache_file(directory, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(stored.to_json(key))
    partial.replace(path)  # whole or absent: a reader never sees half a capture
    return path


def lock(directory: Path) -> int:
    """An exclusive lock on the variant's captures (one capture at a time per machine);
    close the returned descriptor to release it."""
    path = directory.parent / "stored" / f"{directory.name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _etcd(url: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


def read(etcd_url: str) -> Stored:
    """Every CRD the cluster's etcd holds (its JSON API, served beside gRPC)."""
    found = _etcd(etcd_url, "/v3/kv/range", {"key": _b64(PREFIX), "range_end": _b64(PREFIX_END)})
    return Stored(tuple((kv["key"], kv["value"]) for kv in found.get("kvs") or []))


def write_if_absent(etcd_url: str, objects: Sequence[tuple[str, str]]) -> bool:
    """Write each of `objects` whose key does not exist yet (one transaction per key: etcd
    takes at most 1.5 MiB per request, and KServe's CRDs are about 1 MB each); False when
    one existed: the caller applies them all through the API, over what was written."""
    fresh = True
    for key, value in objects:
        answer = _etcd(
            etcd_url,
            "/v3/kv/txn",
            {
                "compare": [
                    {"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
                ],
                "success": [{"request_put": {"key": key, "value": value}}],
            },
        )
        fresh = fresh and bool(answer.get("succeeded"))
    return fresh
