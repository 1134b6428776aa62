"""Read a small UTF-8 text file a user names, or say in one line why not.

Every file kvtier reads from a user (a config.json, a probe result, a kubeconfig) is small
text; a binary, huge or special file is a mistake to report, never a traceback or a read of
gigabytes into memory. Standard library only: the sizing package and the CLI both use it.
"""

from __future__ import annotations

import os
import stat

MAX_BYTES = 16 * 2**20  # config.json is KBs, a probe result one line, fio's report < 1 MiB


class TextFileError(ValueError):
    """Why a file cannot be read as text: one line, naming the file."""


def read_text_file(path: str | os.PathLike[str], limit: int = MAX_BYTES) -> str:
    """The file's text; TextFileError if it is missing, a directory, too big, empty or binary."""
    name = os.fspath(path)
    try:
        info = os.stat(name)
        if stat.S_ISDIR(info.st_mode):
            raise TextFileError(f"{name} is a directory, not a file")
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise TextFileError(f"{name} is {info.st_size:,} bytes; at most {limit:,} are read")
        with open(name, "rb") as source:
            data = source.read(limit + 1)  # a pipe or device has no size to check first
    except OSError as exc:
        raise TextFileError(f"cannot read {name}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise TextFileError(f"{name} holds more than {limit:,} bytes")
    if not data.strip():
        raise TextFileError(f"{name} is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TextFileError(
            f"{name} is not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r})"
        ) from None
    if "\x00" in text:
        raise TextFileError(f"{name} is binary, not text")
    return text
