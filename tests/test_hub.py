"""Hub ids as targets (``ORG/NAME``): read from a Hugging Face cache the test builds, never from the network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from embedcalc.config import hub
from embedcalc.errors import UnsupportedEnvironmentError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


def _cache(root: Path, repo: str, fixture: str, commit: str = "0123abcd", ref: str | None = "main") -> Path:
    base = root / ("models--" + repo.replace("/", "--"))
    snapshot = base / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((FIXTURES / f"{fixture}.json").read_text())
    if ref is not None:
        (base / "refs").mkdir()
        (base / "refs" / ref).write_text(commit)
    return snapshot / "config.json"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("EMBEDCALC_ONLINE", raising=False)
    hub.configure()
    return tmp_path


def test_cache_location_follows_huggingface_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(variable, raising=False)
    assert hub.cache_dir() == Path("~/.cache/huggingface/hub").expanduser()
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert hub.cache_dir() == tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert hub.cache_dir() == tmp_path / "c"


@pytest.mark.parametrize("command", ["check", "analyze", "compare"])
def test_a_cached_hub_id_works_in_any_command(cli: Any, cache: Path, command: str) -> None:
    _cache(cache, "Qwen/Qwen3-8B", "granite-3.0-2b")
    args = [command, "gpt2", "Qwen/Qwen3-8B"] if command == "compare" else [command, "Qwen/Qwen3-8B"]
    result = cli(*args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    names = [r.get("target") or r.get("name") for r in json.loads(result.stdout)["results"]]
    assert "Qwen/Qwen3-8B" in json.dumps(names) or "Qwen/Qwen3-8B" in result.stdout


def test_revision_picks_the_snapshot(cache: Path) -> None:
    _cache(cache, "org/model", "granite-3.0-2b", commit="aaaa", ref="main")
    other = _cache(cache, "org/other", "phi-2", commit="bbbb", ref="v1")
    assert hub.resolve_hub_id("org/other@v1") == other
    hub.configure(revision="bbbb")
    assert hub.resolve_hub_id("org/other") == other  # a commit hash names its snapshot directly
    hub.configure()


def test_revision_flag_through_the_cli(cli: Any, cache: Path) -> None:
    _cache(cache, "org/model", "phi-2", commit="cafe", ref="v2")
    assert cli("check", "org/model").exit_code == 4
    assert cli("--revision", "v2", "check", "org/model").exit_code == 0


def test_not_cached_is_exit_4_with_the_fetch_command(cli: Any, cache: Path) -> None:
    result = cli("analyze", "Org/Missing")
    assert result.exit_code == 4
    assert "huggingface-cli download Org/Missing config.json" in result.stderr
    assert "--online" in result.stderr and "EMBEDCALC_ONLINE" in result.stderr


def test_online_respects_hf_hub_offline(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.configure(online=True)
    with pytest.raises(UnsupportedEnvironmentError, match="HF_HUB_OFFLINE"):
        hub.resolve_hub_id("Org/Missing")
    hub.configure()


def test_online_fetches_only_config_json(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The download call, with huggingface_hub replaced: one file, the revision passed through."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    calls: list[dict[str, Any]] = []
    target = _cache(cache, "x/y", "phi-2")

    def fake(**kwargs: Any) -> str:
        calls.append(kwargs)
        return str(target)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("EMBEDCALC_ONLINE", "1")
    assert hub.resolve_hub_id("Org/Fresh@dev") == target
    assert calls == [{"repo_id": "Org/Fresh", "filename": "config.json", "revision": "dev"}]


def test_paths_and_presets_are_not_hub_ids(cache: Path) -> None:
    assert hub.parse_hub_id("gpt2") is None
    assert hub.parse_hub_id("configs/model.yaml") is None
    assert hub.parse_hub_id("Qwen/Qwen3-8B@main") == ("Qwen/Qwen3-8B", "main")
