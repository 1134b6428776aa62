"""The Prometheus API client and the direct pod scraper, over real HTTP (a local server)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from kvtier.observe import series as s
from kvtier.observe.prometheus import PrometheusClient, PrometheusSource, QueryError
from kvtier.observe.queries import Selection, counters_query
from kvtier.observe.scrape import History, PodEndpoint, scrape
from kvtier.observe.series import Snapshot
from tests import vllm_exposition as vx

Handler = Callable[[BaseHTTPRequestHandler], tuple[int, str, bytes]]


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(handle: Handler) -> str:
        class H(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, ctype, body = handle(self)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


SEL = Selection("llm", "llama-predictor-")


def test_the_counters_query_selects_the_targets_pods() -> None:
    q = counters_query(SEL, [s.LOAD_BYTES])
    assert q == (
        '{__name__=~"vllm:kv_offload_load_bytes_total",namespace="llm",pod=~"llama\\\\-predictor\\\\-.*"}'
    )


def test_a_query_sends_the_bearer_token_and_reads_the_vector(
    serve: Callable[[Handler], str], tmp_path: Path
) -> None:
    seen: dict[str, object] = {}
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {
                    "metric": {"__name__": s.LOAD_BYTES, "pod": "llama-predictor-0", "engine": "0"},
                    "value": [1.0, "100"],
                },
                {
                    "metric": {
                        "__name__": s.PROMPT_TOKENS_BY_SOURCE,
                        "pod": "llama-predictor-0",
                        "source": "local_compute",
                    },
                    "value": [1.0, "7"],
                },
            ],
        },
    }

    def handle(req: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
        seen["auth"] = req.headers.get("Authorization")
        seen["query"] = parse_qs(urlparse(req.path).query)
        return 200, "application/json", json.dumps(answer).encode()

    token = tmp_path / "token"
    token.write_text("sa-token\n")
    client = PrometheusClient(PrometheusSource(serve(handle), token_file=str(token)))
    snap = client.counters(SEL, at=1000.0)
    assert isinstance(snap, Snapshot), snap
    assert seen["auth"] == "Bearer sa-token"
    query = seen["query"]
    assert isinstance(query, dict)
    assert query["time"] == ["1000.000"]
    assert query["query"] == [counters_query(SEL)]
    assert snap.values[s.SeriesKey(s.LOAD_BYTES, "llama-predictor-0")] == 100.0
    key = s.SeriesKey(
        s.PROMPT_TOKENS_BY_SOURCE, "llama-predictor-0", (("source", "local_compute"),)
    )
    assert snap.values[key] == 7.0


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (401, b"{}", "Unauthorized"),
        (403, b"forbidden", "Unauthorized"),
        (200, b"<html>", "BadAnswer"),
        (400, b'{"status":"error","error":"parse error"}', "HTTPError"),
        (200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}', "BadAnswer"),
    ],
)
def test_errors_are_values(
    serve: Callable[[Handler], str], status: int, body: bytes, reason: str
) -> None:
    url = serve(lambda req: (status, "application/json", body))
    result = PrometheusClient(PrometheusSource(url)).counters(SEL, at=1.0)
    assert isinstance(result, QueryError)
    assert result.reason == reason, result.message


def test_an_unreachable_or_slow_server_is_an_error_not_a_hang(
    serve: Callable[[Handler], str],
) -> None:
    closed = PrometheusClient(PrometheusSource("http://127.0.0.1:9", timeout_seconds=1))
    result = closed.counters(SEL, at=1.0)
    assert isinstance(result, QueryError) and result.reason == "Unreachable"

    def slow(req: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
        time.sleep(2)
        return 200, "application/json", b"{}"

    started = time.monotonic()
    slow_answer = PrometheusClient(PrometheusSource(serve(slow), timeout_seconds=0.3)).query("up")
    assert isinstance(slow_answer, QueryError) and slow_answer.reason == "Timeout"
    assert time.monotonic() - started < 1.5


def test_a_missing_token_file_is_an_error(tmp_path: Path) -> None:
    source = PrometheusSource("http://127.0.0.1:9", token_file=str(tmp_path / "none"))
    result = PrometheusClient(source).query("up")
    assert isinstance(result, QueryError) and result.reason == "Unauthorized"


def test_queries_are_spaced_by_the_minimum_interval(serve: Callable[[Handler], str]) -> None:
    url = serve(lambda req: (200, "application/json", b'{"status":"success","data":{}}'))
    now = [100.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    client = PrometheusClient(
        PrometheusSource(url, min_interval_seconds=0.5), clock=lambda: now[0], sleep=sleep
    )
    for _ in range(3):
        client.query("up")
    assert waits == [0.5, 0.5]


def test_a_direct_scrape_reads_every_pod(serve: Callable[[Handler], str]) -> None:
    traffic = vx.SCENARIOS["hit"]
    body = vx.render("0.33.0", "cpu+fs", vx.totals(traffic, 60))
    url = serve(lambda req: (200, "text/plain; version=0.0.4", body))
    eps = [PodEndpoint("pod-a", f"{url}/metrics"), PodEndpoint("pod-b", f"{url}/metrics")]
    snap = scrape(eps, at=60.0)
    assert isinstance(snap, Snapshot)
    per_pod = snap.values[
        s.SeriesKey(s.PROMPT_TOKENS_BY_SOURCE, "pod-b", (("source", "local_compute"),))
    ]
    assert per_pod == pytest.approx(traffic.prompt_tokens * 60 * 0.3)
    bad = serve(lambda req: (503, "text/plain", b"down"))
    failed = scrape([*eps, PodEndpoint("pod-c", f"{bad}/metrics")])
    assert isinstance(failed, QueryError) and "pod-c" in failed.message


def test_history_finds_the_snapshot_a_window_back() -> None:
    history = History()
    for at in (0.0, 30.0, 60.0, 90.0):
        history.add(Snapshot(at, {}))
    assert history.baseline(now=50.0, window_seconds=60) is None
    base = history.baseline(now=120.0, window_seconds=60)
    assert base is not None and base.at == 60.0
