"""crd_documents: the upstream CRD files' documents, parsed once per content and kept as JSON."""

from __future__ import annotations

import datetime
from pathlib import Path

import yaml

from crd_documents import documents, parsed_file

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
  creationTimestamp: null
spec:
  group: example.com
  versions:
  - name: v1
    served: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          size: {type: integer, maximum: 10, minimum: -1.5}
---
---
kind: Second
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "crds" / "full" / "example.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_documents_are_yamls_and_kept_beside_the_variant(tmp_path: Path) -> None:
    path = _file(tmp_path, CRD)
    want = [d for d in yaml.safe_load_all(CRD) if d is not None]
    assert documents(path) == want
    kept = parsed_file(path, path.read_bytes())
    assert kept.parent == tmp_path / "crds" / "parsed" and kept.name.startswith("full-example-")
    # Read from what was kept: a changed copy there is what comes back.
    kept.write_text('[{"kind": "FromTheCache"}]')
    assert documents(path) == [{"kind": "FromTheCache"}]


def test_a_changed_file_is_parsed_again(tmp_path: Path) -> None:
    path = _file(tmp_path, CRD)
    first = parsed_file(path, path.read_bytes())
    documents(path)
    path.write_text(CRD.replace("maximum: 10", "maximum: 12"))
    docs = documents(path)
    assert (
        docs[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["size"]["maximum"]
        == 12
    )
    assert parsed_file(path, path.read_bytes()) != first
    assert not first.exists()  # the documents of the earlier bytes are gone


def test_documents_json_cannot_hold_are_parsed_each_time(tmp_path: Path) -> None:
    for text in ("when: 2024-01-02\n", "200: ok\n"):  # a date; a key that is no string
        path = _file(tmp_path, text)
        assert documents(path) == [yaml.safe_load(text)]
        assert not parsed_file(path, path.read_bytes()).exists()
    assert documents(_file(tmp_path, "when: 2024-01-02\n")) == [{"when": datetime.date(2024, 1, 2)}]
