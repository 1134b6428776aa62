"""Names and labels: valid for their kind, stable, collision-free."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from kvtier.names import API_VERSION
from kvtier.names.labels import (
    MANAGED_BY,
    TIER_ID,
    TIER_NAME,
    TIER_NAMESPACE,
    TierRef,
    owner_references,
    tier_labels,
    tier_selector,
)
from kvtier.names.objects import (
    cephfs_claim_name,
    hashed_name,
    nvme_storage_class_name,
    nvme_volume_name,
    python_hash_seed,
    tier_id,
)
from kvtier.render.quantities import quantity_to_bytes, round_up, to_quantity

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

labels = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
subdomains = st.lists(labels, min_size=1, max_size=5).map(".".join).filter(lambda s: len(s) <= 253)


def test_pv_name_is_readable_when_short() -> None:
    name = nvme_volume_name("llm", "llama70b", "gpu-node-2")
    assert re.fullmatch(r"kvtier-llm-llama70b-gpu-node-2-[0-9a-f]{8}", name)
    assert name == nvme_volume_name("llm", "llama70b", "gpu-node-2")  # stable


def test_dash_ambiguity_does_not_collide() -> None:
    assert nvme_volume_name("a-b", "c", "n") != nvme_volume_name("a", "b-c", "n")


def test_long_names_are_cut_to_the_limit_and_stay_unique() -> None:
    ns, tier = "n" * 63, "t" * 253
    a = nvme_volume_name(ns, tier, "node-a." + "x" * 200)
    b = nvme_volume_name(ns, tier, "node-b." + "x" * 200)
    assert len(a) <= 253 and len(b) <= 253 and a != b
    assert len(hashed_name("x" * 100, max_length=63)) == 63


@given(ns=labels, tier=subdomains, node=subdomains)
def test_pv_names_valid(ns: str, tier: str, node: str) -> None:
    name = nvme_volume_name(ns, tier, node)
    assert len(name) <= 253 and DNS_SUBDOMAIN.match(name)
    assert len(hashed_name(ns, tier, node, max_length=63)) <= 63
    assert DNS_LABEL.match(hashed_name(ns, tier, node, max_length=63))


@given(st.lists(st.tuples(labels, subdomains, subdomains), min_size=2, max_size=20, unique=True))
def test_pv_names_collision_free(keys: list[tuple[str, str, str]]) -> None:
    names = {nvme_volume_name(*key) for key in keys}
    assert len(names) == len(keys)


@given(tier=subdomains)
def test_claim_name_valid(tier: str) -> None:
    name = cephfs_claim_name(tier)
    assert len(name) <= 253 and DNS_SUBDOMAIN.match(name)


def test_claim_and_class_names() -> None:
    assert cephfs_claim_name("gpt-oss") == "kvtier-gpt-oss-cephfs"
    assert cephfs_claim_name("t" * 253) != cephfs_claim_name("t" * 252 + "u")
    assert nvme_storage_class_name("local-nvme") == "kvtier-nvme-local-nvme"


def test_tier_id_and_seed_are_stable_and_distinct() -> None:
    assert tier_id("llm", "a") == tier_id("llm", "a") != tier_id("llm2", "a")
    assert len(tier_id("llm", "a")) == 16
    seed = python_hash_seed("llm", "gpt-oss")
    assert seed == python_hash_seed("llm", "gpt-oss") != python_hash_seed("llm", "other")
    assert 0 <= int(seed) <= 2**32 - 1  # the range Python accepts


def test_tier_labels() -> None:
    tier = TierRef("llm", "gpt-oss", "uid-1")
    assert tier_labels(tier) == {
        MANAGED_BY: "kvtier",
        TIER_NAMESPACE: "llm",
        TIER_NAME: "gpt-oss",
        TIER_ID: tier_id("llm", "gpt-oss"),
    }
    assert tier_selector(tier) == {TIER_ID: tier.id}


@given(ns=labels, tier=subdomains)
def test_tier_labels_are_valid_label_values(ns: str, tier: str) -> None:
    for value in tier_labels(TierRef(ns, tier)).values():
        assert len(value) <= 63 and LABEL_VALUE.match(value)


def test_long_tier_name_has_no_name_label() -> None:
    assert TIER_NAME not in tier_labels(TierRef("llm", "t" * 64))


def test_owner_reference() -> None:
    assert owner_references(TierRef("llm", "a")) == []
    assert owner_references(TierRef("llm", "a", "u-1")) == [
        {
            "apiVersion": API_VERSION,
            "kind": "KVCacheTier",
            "name": "a",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]


def test_quantities() -> None:
    assert to_quantity(3 << 40) == "3Ti"
    assert to_quantity(1536 << 20) == "1536Mi"
    assert to_quantity(1000) == "1000"
    assert to_quantity(0) == "0"
    assert quantity_to_bytes("3Ti") == 3 << 40
    assert quantity_to_bytes("1.5G") == 1_500_000_000
    assert quantity_to_bytes(10) == 10
    assert round_up(1) == 1 << 30 and round_up(1 << 30) == 1 << 30


@given(st.integers(min_value=0, max_value=1 << 62))
def test_quantity_round_trip(n: int) -> None:
    assert quantity_to_bytes(to_quantity(n)) == n
