"""The fio runner and parser, against fio really running on this machine.

fio's files go to a real disk directory (tmpfs would make O_DIRECT meaningless); /dev/shm is the
tmpfs case. Every run is short: 2 jobs, 1 s, 8 MiB files.
"""

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtier.probe import (
    MAX_RESULT_BYTES,
    FioResult,
    ProbeEnvironmentError,
    ProbeInputError,
    ProbeOptions,
    default_file_bytes,
    direct_io_problem,
    filesystem_type,
    parse_fio_json,
    probe_argv,
    read_probe_result,
    run_probe,
)
from kvtier.probe.fio_runner import MEMORY_FILESYSTEMS
from kvtier.sizing import fio_args

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "fio"
GPT_OSS_BLOCK = 1_179_648
SHM = "/dev/shm"


def _fstype(path: Path) -> str | None:
    return filesystem_type(os.path.realpath(path), Path("/proc/self/mountinfo").read_text())


@pytest.fixture
def disk_dir(tmp_path: Path) -> Path:
    """tmp_path when it is on a disk, else a scratch directory under the ignored build/."""
    if _fstype(tmp_path) not in MEMORY_FILESYSTEMS:
        return tmp_path
    scratch = REPO / "build" / "test-probe" / tmp_path.name
    scratch.mkdir(parents=True, exist_ok=True)
    return scratch


def _options(directory: Path | str, **overrides: object) -> ProbeOptions:
    settings: dict[str, object] = {
        "directory": str(directory),
        "block_bytes": GPT_OSS_BLOCK,
        "runtime_seconds": 1,
        "numjobs": 2,
        "size_bytes": 8 << 20,
        **overrides,
    }
    return ProbeOptions(**settings)  # type: ignore[arg-type]


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A private directory on /dev/shm (tmpfs), so concurrent test runs never meet."""
    directory = Path(tempfile.mkdtemp(prefix="kvtier-test-", dir=SHM))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> FioResult:
    directory = tmp_path_factory.mktemp("fio")
    if _fstype(directory) in MEMORY_FILESYSTEMS:
        directory = REPO / "build" / "test-probe-module"
        directory.mkdir(parents=True, exist_ok=True)
    if shutil.which("fio") is None:
        pytest.skip("fio not installed")
    result = run_probe(_options(directory))
    assert os.listdir(directory) == []  # fio's files and the O_DIRECT check file are gone
    return result


def test_real_run_on_disk(real_run: FioResult) -> None:
    r = real_run
    assert not r.buffered
    assert r.block_bytes == GPT_OSS_BLOCK and r.numjobs == 2
    assert 0 < r.read.p50_seconds <= r.read.p99_seconds < 10
    assert r.read.bandwidth_bytes_per_second > 0 and r.read.iops > 0 and r.read.ios > 0
    assert r.write is not None and 0 < r.write.p50_seconds <= r.write.p99_seconds
    # 75/25 read/write: reads clearly dominate.
    assert r.read.ios > r.write.ios
    assert 0.9 < r.runtime_seconds < 5
    assert r.fio_version.startswith("fio-3")


def test_real_result_json_is_a_termination_message(real_run: FioResult) -> None:
    text = real_run.to_json()
    assert len(text.encode()) < MAX_RESULT_BYTES and "\n" not in text
    doc = json.loads(text)
    assert doc["p99Seconds"] == doc["read"]["p99Seconds"] == real_run.read.p99_seconds
    assert doc["bandwidthBytesPerSecond"] == real_run.read.bandwidth_bytes_per_second
    assert doc["buffered"] is False and doc["measuredAt"].endswith("Z")
    status = read_probe_result(text)
    assert set(status) == {
        "p50Seconds",
        "p99Seconds",
        "bandwidthBytesPerSecond",
        "measuredAt",
        "buffered",
    }


def test_tmpfs_refused_without_allow_buffered(shm_dir: Path) -> None:
    assert _fstype(shm_dir) == "tmpfs"
    with pytest.raises(ProbeEnvironmentError, match=r"tmpfs.*O_DIRECT.*--allow-buffered"):
        run_probe(_options(shm_dir))


def test_tmpfs_with_allow_buffered_is_marked_buffered(shm_dir: Path) -> None:
    result = run_probe(_options(shm_dir, allow_buffered=True))
    assert result.buffered
    assert json.loads(result.to_json())["buffered"] is True
    assert os.listdir(shm_dir) == []


def test_direct_io_problem_on_disk_and_tmpfs(disk_dir: Path, shm_dir: Path) -> None:
    assert direct_io_problem(str(disk_dir)) is None
    assert os.listdir(disk_dir) == []
    problem = direct_io_problem(str(shm_dir))
    assert problem is not None and "tmpfs" in problem


def test_direct_io_refused_by_the_file_system(
    disk_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def refuse_direct(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", refuse_direct)
    assert direct_io_problem(str(disk_dir)) == "its file system refuses O_DIRECT"


def test_missing_fio(disk_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(disk_dir))
    with pytest.raises(ProbeEnvironmentError, match="fio not found"):
        run_probe(_options(disk_dir))


def test_bad_directories(disk_dir: Path) -> None:
    with pytest.raises(ProbeEnvironmentError, match="does not exist"):
        run_probe(_options(disk_dir / "missing"))
    (disk_dir / "file").write_text("x")
    with pytest.raises(ProbeEnvironmentError, match="is not a directory"):
        run_probe(_options(disk_dir / "file"))
    with pytest.raises(ProbeEnvironmentError, match="is not writable"):
        run_probe(_options("/proc"))


def test_files_larger_than_the_free_space(disk_dir: Path) -> None:
    with pytest.raises(ProbeInputError, match="exceed"):
        run_probe(_options(disk_dir, size_bytes=1 << 60))


@pytest.mark.parametrize("field", ["block_bytes", "runtime_seconds", "numjobs", "size_bytes"])
def test_non_positive_options(field: str) -> None:
    with pytest.raises(ProbeInputError, match="greater than zero"):
        run_probe(_options(SHM, **{field: 0}))


def test_argv_is_the_study_pattern_with_json() -> None:
    argv = probe_argv("/d", 5_242_880, numjobs=16, runtime_seconds=60, size_bytes=1 << 30)
    assert argv[:-1] == fio_args(5_242_880, "/d", jobs=16, runtime_seconds=60, size_bytes=1 << 30)
    for option in (
        "--rw=randrw",
        "--rwmixread=75",
        "--bs=5242880",
        "--iodepth=1",
        "--numjobs=16",
        "--direct=1",
        "--ioengine=libaio",
        "--runtime=60",
        "--time_based",
        "--group_reporting",
        "--output-format=json",
    ):
        assert option in argv
    buffered = probe_argv(
        "/d", 4096, numjobs=1, runtime_seconds=1, size_bytes=4096, direct=False, fio="/x/fio"
    )
    assert buffered[0] == "/x/fio" and "--direct=0" in buffered and "--direct=1" not in buffered


def test_default_file_size() -> None:
    gib = 1 << 30
    # Plenty of space: the 1 GiB cap.
    assert default_file_bytes(1000 * gib, 16, 5_242_880) == gib // 5_242_880 * 5_242_880
    # 10 GiB free: half of it over 16 jobs, whole blocks.
    assert default_file_bytes(10 * gib, 16, 4096) == 5 * gib // 16
    size = default_file_bytes(10 * gib, 16, GPT_OSS_BLOCK)
    assert size % GPT_OSS_BLOCK == 0 and 16 * size <= 5 * gib
    with pytest.raises(ProbeEnvironmentError, match="free"):
        default_file_bytes(16 * 5_242_880, 16, 5_242_880)


def test_filesystem_type_longest_mount_wins() -> None:
    mountinfo = "\n".join(
        [
            "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw",
            "23 22 0:21 / /dev/shm rw,nosuid - tmpfs tmpfs rw",
            r"24 22 0:40 / /mnt/kv\040cache rw - ceph 10.0.0.1:/ rw",
            "25 22 0:41 / /mnt/kv rw shared:5 master:2 - xfs /dev/nvme0n1 rw",
        ]
    )
    assert filesystem_type("/dev/shm/x", mountinfo) == "tmpfs"
    assert filesystem_type("/dev/shmem", mountinfo) == "ext4"
    assert filesystem_type("/mnt/kv cache/a", mountinfo) == "ceph"
    assert filesystem_type("/mnt/kv", mountinfo) == "xfs"
    assert filesystem_type("/", mountinfo) == "ext4"
    assert filesystem_type("/x", "") is None


# --- parsing: the committed real report, and what fio may print instead ---------------------


def _fixture() -> dict[str, object]:
    doc: dict[str, object] = json.loads((FIXTURES / "randrw-75-real.json").read_text())
    return doc


def test_parse_committed_real_report() -> None:
    text = (FIXTURES / "randrw-75-real.json").read_text()
    raw = json.loads(text)
    job = raw["jobs"][0]
    assert len(raw["jobs"]) == 1  # group_reporting
    result = parse_fio_json(text)
    assert result.read.p50_seconds == job["read"]["clat_ns"]["percentile"]["50.000000"] / 1e9
    assert result.read.p99_seconds == job["read"]["clat_ns"]["percentile"]["99.000000"] / 1e9
    assert result.read.bandwidth_bytes_per_second == job["read"]["bw_bytes"]
    assert result.read.iops == round(job["read"]["iops"], 2)
    assert result.write is not None
    assert result.write.p99_seconds == job["write"]["clat_ns"]["percentile"]["99.000000"] / 1e9
    assert result.block_bytes == GPT_OSS_BLOCK and result.numjobs == 4
    assert result.measured_at.timestamp() == raw["timestamp"]


def test_committed_kvtier_probe_result_reads_back() -> None:
    status = read_probe_result((FIXTURES / "kvtier-probe-real.json").read_text())
    assert status["buffered"] is False and status["p99Seconds"] > 0


def test_parse_tolerates_notes_before_the_json() -> None:
    text = "note: both iodepth >= 1 and synchronous I/O engine are selected\n" + json.dumps(
        _fixture()
    )
    assert parse_fio_json(text).read.ios > 0


def test_fio_report_is_accepted_as_a_probe_result() -> None:
    status = read_probe_result((FIXTURES / "randrw-75-real.json").read_text())
    assert (
        status["p99Seconds"]
        == parse_fio_json((FIXTURES / "randrw-75-real.json").read_text()).read.p99_seconds
    )


def _broken(mutate: str) -> str:
    doc = json.loads(json.dumps(_fixture()))
    job = doc["jobs"][0]
    if mutate == "no-jobs":
        doc["jobs"] = []
    elif mutate == "job-error":
        job["error"] = 5
    elif mutate == "no-reads":
        job["read"]["total_ios"] = 0
    elif mutate == "no-percentiles":
        del job["read"]["clat_ns"]["percentile"]
    elif mutate == "bad-bw":
        job["read"]["bw_bytes"] = "fast"
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "did not print JSON: empty"),
        ("fio: pid=1, err=22/file:filesetup.c", "did not print JSON: fio: pid=1"),
        ("[1, 2]", "did not print JSON"),
        (_broken("no-jobs"), "no jobs"),
        (_broken("job-error"), "error 5"),
        (_broken("no-reads"), "no reads"),
        (_broken("no-percentiles"), "percentiles"),
        (_broken("bad-bw"), "bw_bytes"),
    ],
)
def test_parse_errors_are_one_line(text: str, message: str) -> None:
    with pytest.raises(ProbeEnvironmentError, match=message) as info:
        parse_fio_json(text)
    assert "\n" not in str(info.value)


def test_run_without_writes_reports_none() -> None:
    doc = json.loads(json.dumps(_fixture()))
    doc["jobs"][0]["write"]["total_ios"] = 0
    result = parse_fio_json(json.dumps(doc), buffered=True)
    assert result.write is None and result.buffered
    assert json.loads(result.to_json())["write"] is None
