"""Hub ids as targets (``ORG/NAME``): read from a Hugging Face cache the test builds, never from the network."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from paths import HF_FIXTURES

from embedcalc.errors import UnsupportedEnvironmentError
from embedcalc.sources import hub

FIXTURES = HF_FIXTURES


def _cache(
    root: Path, repo: str, fixture: str, commit: str = "0123abcd" * 5, ref: str | None = "main"
) -> Path:
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
    _cache(cache, "org/model", "granite-3.0-2b", commit="a" * 40, ref="main")
    other = _cache(cache, "org/other", "phi-2", commit="b" * 40, ref="v1")
    assert hub.resolve_hub_id("org/other@v1") == other
    hub.configure(revision="b" * 40)
    assert hub.resolve_hub_id("org/other") == other  # a commit hash names its snapshot directly
    hub.configure()


def test_revision_flag_through_the_cli(cli: Any, cache: Path) -> None:
    _cache(cache, "org/model", "phi-2", commit="cafe" * 10, ref="v2")
    assert cli("check", "org/model").exit_code == 4
    assert cli("--revision", "v2", "check", "org/model").exit_code == 0


def test_not_cached_is_exit_4_with_the_fetch_command(cli: Any, cache: Path) -> None:
    result = cli("analyze", "Org/Missing")
    assert result.exit_code == 4
    assert "hf download Org/Missing config.json" in result.stderr
    assert "--online" in result.stderr and "EMBEDCALC_ONLINE" in result.stderr


def test_online_respects_hf_hub_offline(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.configure(online=True)
    with pytest.raises(UnsupportedEnvironmentError, match="HF_HUB_OFFLINE"):
        hub.resolve_hub_id("Org/Missing")
    hub.configure()


def test_paths_and_presets_are_not_hub_ids(cache: Path) -> None:
    assert hub.parse_hub_id("gpt2") is None
    assert hub.parse_hub_id("configs/model.yaml") is None
    assert hub.parse_hub_id("Qwen/Qwen3-8B@main") == ("Qwen/Qwen3-8B", "main")


# --- hostile caches (issue 24): nothing outside the cache is read, every read is bounded ------------------------

COMMIT = "0123abcd" * 5


def test_revision_climbing_out_of_the_cache_is_refused(cli: Any, cache: Path, tmp_path_factory: Any) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "config.json").write_text((FIXTURES / "phi-2.json").read_text())
    _cache(cache, "org/m", "phi-2")
    climb = "../" * 3 + str(elsewhere.relative_to(elsewhere.anchor))
    result = cli("check", f"org/m@{climb}")
    assert result.exit_code == 3, result.stderr
    assert "revision" in result.stderr and "'..'" in result.stderr
    flag = cli("--revision", "../../../x", "check", "org/m")
    assert flag.exit_code == 2 and "--revision" in flag.stderr


@pytest.mark.parametrize("content", ["../..", "/etc", "../../../../" + COMMIT])
def test_a_ref_that_is_no_commit_hash_is_refused(cli: Any, cache: Path, content: str) -> None:
    _cache(cache, "org/m", "phi-2")
    (cache / "models--org--m" / "refs" / "main").write_text(content)
    result = cli("check", "org/m")
    assert result.exit_code == 3, result.stderr
    assert "refs/main" in result.stderr and "not a 40-character commit hash" in result.stderr


def test_a_huge_ref_is_read_bounded(cli: Any, cache: Path) -> None:
    _cache(cache, "org/m", "phi-2")
    ref = cache / "models--org--m" / "refs" / "main"
    with ref.open("wb") as f:  # 3 GiB, sparse: nothing is written, a whole read would need 3 GiB of memory
        f.truncate(3 << 30)
    result = cli("check", "org/m")
    assert result.exit_code == 3, result.stderr
    assert "refs/main" in result.stderr and "found in the Hugging Face cache but unreadable" in result.stderr


def test_a_snapshot_symlinked_out_of_the_cache_is_refused(
    cli: Any, cache: Path, tmp_path_factory: Any
) -> None:
    outside = tmp_path_factory.mktemp("outside") / "config.json"
    outside.write_text((FIXTURES / "phi-2.json").read_text())
    snapshot = cache / "models--org--m" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(outside)
    (cache / "models--org--m" / "refs").mkdir()
    (cache / "models--org--m" / "refs" / "main").write_text(COMMIT)
    result = cli("check", "org/m")
    assert result.exit_code == 3 and "outside the cache" in result.stderr


def _special(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("{}")
        path.chmod(0)


@pytest.mark.parametrize("kind", ["directory", "fifo", "unreadable"])
def test_a_config_json_that_cannot_be_read_is_found_but_unreadable(cli: Any, cache: Path, kind: str) -> None:
    if kind == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads files without permission")
    config = _cache(cache, "org/m", "phi-2")
    _special(config, kind)
    result = cli("check", "org/m")
    assert result.exit_code == 3, result.stderr
    assert "found in the Hugging Face cache but" in result.stderr and "not in the local" not in result.stderr


def test_hub_grammar(cache: Path) -> None:
    assert hub.parse_hub_id("org/a--b") is None  # the hub refuses "--" and ".." in ids
    assert hub.parse_hub_id("org/a..b") is None
    assert hub.parse_hub_id("org/m@refs/pr/1") == ("org/m", "refs/pr/1")
    for bad in ("", "/abs", "a//b", ".hidden", "a/.b", "x.lock", "a b", "a:b", "x" * 300):
        assert hub.revision_problem(bad) is not None, bad
