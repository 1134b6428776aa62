"""The documents of an upstream CRD file (`upstream_crds`), parsed once per content.

KServe's and LWS's files are megabytes of schema: libyaml's parser still builds each node in
Python, so reading the full variant costs about 3 CPU-seconds, and every test worker read it
again. The documents are kept as JSON beside the files (Python's JSON decoder reads them in a
tenth of a second), keyed by the file's bytes: a new fetch is parsed again, and replaces the
documents of the bytes before it. A file whose documents JSON cannot hold exactly (a date, a
key that is not a string) is parsed each time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parsed_file(path: Path, data: bytes) -> Path:
    """Where the documents of `path` (a file in a variant's directory) are kept."""
    key = hashlib.sha256(data).hexdigest()[:16]
    return path.parent.parent / "parsed" / f"{path.parent.name}-{path.stem}-{key}.json"


def documents(path: Path) -> list[Any]:
    """The non-empty documents of the YAML file `path`, as yaml.safe_load_all reads them."""
    data = path.read_bytes()
    kept = parsed_file(path, data)
    try:
        found: list[Any] = json.loads(kept.read_bytes())
        return found
    except (OSError, ValueError):
        pass
    docs = [d for d in yaml.load_all(data, Loader=_LOADER) if d is not None]
    try:
        text = json.dumps(docs)
    except (TypeError, ValueError):
        return docs
    if json.loads(text) == docs:
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(text)
        partial.replace(kept)  # whole or absent: workers may write it side by side
        for stale in kept.parent.glob(f"{path.parent.name}-{path.stem}-*.json"):
            if stale != kept:  # the documents of the file's earlier bytes
                stale.unlink(missing_ok=True)
    return docs
