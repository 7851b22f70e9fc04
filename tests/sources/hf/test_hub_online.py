"""``--online`` against a local HTTP server standing in for the hub (issue 33): one file fetched into the cache in
huggingface_hub's layout and read offline after; a server that never answers, one that answers 5 MB, one that
names no commit and a 404 are exit 4 within the time bounds, and a refused answer leaves nothing in the cache."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opened_files import opened_files
from paths import HF_FIXTURES

from embedcalc.errors import UnsupportedEnvironmentError
from embedcalc.sources import hub

COMMIT = "89abcdef" * 5
CONFIG = (HF_FIXTURES / "phi-2.json").read_bytes()


REQUESTS: list[tuple[str, str | None]] = []  # (path, authorization header) of every request the hub got


class _Hub(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        REQUESTS.append((self.path, self.headers.get("authorization")))
        repo = self.path.split("/resolve/")[0].strip("/")
        if repo == "org/silent":
            time.sleep(3)  # longer than the test's timeouts: the client gives up first
            return
        if repo == "org/missing":
            self.send_error(404)
            return
        self.send_response(200)
        if repo != "org/nocommit":
            self.send_header("X-Repo-Commit", COMMIT)
        if repo == "org/huge":  # 10 MB with no length: the bound must hold while streaming
            self.end_headers()
            for _ in range(160):
                self.wfile.write(b" " * 65536)
            return
        self.send_header("Content-Length", str(len(CONFIG)))
        self.end_headers()
        self.wfile.write(CONFIG)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{httpd.server_address[1]}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("EMBEDCALC_ONLINE", "1")
    monkeypatch.setattr(hub, "ONLINE_DEADLINE_S", 2.0)
    hub.configure()
    REQUESTS.clear()
    yield tmp_path / "hub"
    httpd.shutdown()
    httpd.server_close()


def test_one_config_is_fetched_into_the_cache_and_read_offline_after(server: Path) -> None:
    pytest.importorskip("huggingface_hub")
    path = hub.resolve_hub_id("org/fresh@dev")
    assert path is not None and path.read_bytes() == CONFIG
    base = server / "models--org--fresh"
    assert path == base / "snapshots" / COMMIT / "config.json" and path.is_symlink()
    assert (base / "refs" / "dev").read_text() == COMMIT
    assert hub.cached_config("org/fresh", "dev") == path  # offline from now on
    assert json.loads(path.read_text())["model_type"] == "phi"


@pytest.mark.parametrize(
    ("repo", "why"),
    [("org/silent", "no complete answer within 2 s"), ("org/huge", "over 8,388,608 bytes"),
     ("org/nocommit", "which commit"), ("org/missing", "HTTP 404")],
)  # fmt: skip
def test_a_bad_answer_is_exit_4_and_leaves_nothing_in_the_cache(server: Path, repo: str, why: str) -> None:
    pytest.importorskip("huggingface_hub")
    start = time.monotonic()
    with pytest.raises(UnsupportedEnvironmentError) as info:
        hub.resolve_hub_id(repo)
    assert why in info.value.message, info.value.message
    assert time.monotonic() - start < 30  # the bound: 2 s in all (not a speed, a hang check)
    assert not (server / ("models--" + repo.replace("/", "--"))).exists()


def test_only_the_config_is_requested_with_the_token(server: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One request, for config.json, carrying HF_TOKEN as huggingface_hub sends it; nothing else of the endpoint
    (huggingface_hub's own header builder first fetched /api/agent-harnesses, whole, whatever its size)."""
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.delenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", raising=False)
    assert hub.resolve_hub_id("org/token") is not None
    assert REQUESTS == [("/org/token/resolve/main/config.json", "Bearer hf_test_token")]


def test_nothing_outside_the_hub_cache_is_opened(server: Path) -> None:
    """The fetch opens only the hub cache and, for the token, huggingface_hub's token file (an audit hook on every
    open): no registry or state of huggingface_hub's own in HF_HOME."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    recorder = opened_files()
    with recorder.record():
        assert hub.resolve_hub_id("org/audited") is not None
    token_file = Path(huggingface_hub.constants.HF_TOKEN_PATH)
    assert [p for p in recorder.outside(server) if Path(p) != token_file] == []
    assert recorder.under(server)  # the recorder saw the cache being written
