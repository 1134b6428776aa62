"""Model owners need no RBAC written for them: the chart's aggregated ClusterRoles (in
deploy/manifests/rbac.yaml, applied when the control plane starts) extend the built-in
`admin`/`edit` roles to manage KVCacheTiers and `view` to read them. Checked on the real
control plane by impersonating users bound to the built-in roles in one namespace."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from localcluster import LocalCluster
from tests.e2e.kube_helpers import eventually

REPO = Path(__file__).resolve().parents[2]


def as_user(cluster: LocalCluster, user: str, *args: str, stdin: str | None = None) -> str:
    """kubectl as `user` (impersonated by the admin); raises on refusal with its message."""
    proc = subprocess.run(
        [cluster.binary("kubectl"), f"--kubeconfig={cluster.admin_kubeconfig}", f"--as={user}",
         *args],
        input=stdin, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise PermissionError(proc.stderr.strip())
    return proc.stdout


def can(
    cluster: LocalCluster,
    user: str,
    verb: str,
    ns: str | None,
    resource: str = "kvcachetiers.kvcache.io",
) -> bool:
    """`kubectl auth can-i` as the user (it exits 1 on "no")."""
    scope = ["-n", ns] if ns else []
    try:
        out = as_user(cluster, user, "auth", "can-i", verb, resource, *scope)
    except PermissionError:
        return False
    return out.strip() == "yes"


@pytest.fixture(scope="module")
def team(cluster: LocalCluster, crds: None) -> Iterator[str]:
    """A namespace where `owner` holds `edit`, `lead` holds `admin`, `auditor` holds `view`."""
    ns = f"team-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    for user, role in (("owner", "edit"), ("lead", "admin"), ("auditor", "view")):
        cluster.kubectl(
            "create", "rolebinding", f"{user}-{role}", f"--clusterrole={role}",
            f"--user={user}", "-n", ns,
        )  # fmt: skip
    try:
        yield ns
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")


def tier(ns: str, name: str) -> str:
    body = yaml.safe_load((REPO / "examples" / "kvcachetier.yaml").read_text())
    body["metadata"] = {"name": name, "namespace": ns}
    return json.dumps(body)


def test_edit_and_admin_create_and_delete_tiers(cluster: LocalCluster, team: str) -> None:
    # The aggregation controller adds the rules to the built-in roles shortly after start.
    eventually(lambda: can(cluster, "owner", "create", team), what="edit to aggregate kvtier")
    as_user(cluster, "owner", "create", "-f", "-", stdin=tier(team, "owned"))
    as_user(cluster, "owner", "patch", "kvt", "owned", "-n", team, "--type=merge",
            "-p", '{"spec":{"workload":{"concurrentSessions":32}}}')  # fmt: skip
    eventually(lambda: can(cluster, "lead", "create", team), what="admin to aggregate kvtier")
    as_user(cluster, "lead", "create", "-f", "-", stdin=tier(team, "led"))
    as_user(cluster, "lead", "delete", "kvt", "led", "-n", team)


def test_view_reads_but_does_not_write(cluster: LocalCluster, team: str) -> None:
    eventually(lambda: can(cluster, "auditor", "list", team), what="view to aggregate kvtier")
    cluster.kubectl("apply", "-f", "-", stdin=tier(team, "seen"))
    listed = json.loads(as_user(cluster, "auditor", "get", "kvt", "-n", team, "-o", "json"))
    assert "seen" in {t["metadata"]["name"] for t in listed["items"]}
    with pytest.raises(PermissionError, match="forbidden"):
        as_user(cluster, "auditor", "create", "-f", "-", stdin=tier(team, "nope"))
    assert not can(cluster, "auditor", "delete", team)


def test_roles_stop_at_the_namespace(cluster: LocalCluster, team: str) -> None:
    """`edit` in one namespace grants nothing in another, nor on the cluster's policy."""
    eventually(lambda: can(cluster, "owner", "create", team), what="edit to aggregate kvtier")
    assert not can(cluster, "owner", "create", "default")
    assert not can(cluster, "owner", "create", None, "kvcachepolicies.kvcache.io")
    assert can(cluster, "owner", "create", team)  # the control: the same check says yes
