"""Settings come from TICKWHEEL_* variables and an optional TOML file, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickwheel.config import ConfigError, load_settings

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("TICKWHEEL_"):
            monkeypatch.delenv(name)


def test_defaults_point_at_the_dev_stack() -> None:
    """with nothing set, the addresses are the dev stack's and the documented defaults hold"""
    s = load_settings()
    assert s.effective_dsn == "postgresql://tickwheel@127.0.0.1:55432/tickwheel"
    assert s.effective_kafka == "127.0.0.1:59092"
    assert s.effective_zk == "127.0.0.1:52181"
    assert (s.shards, s.tick_ms, s.horizon_s, s.lease_s) == (64, 100, 600, 30)
    assert s.priority_weights == {"high": 6, "normal": 3, "low": 1}
    assert s.payload_limit_bytes == 256 * 1024


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """TICKWHEEL_* variables set fields, including JSON for the weights"""
    monkeypatch.setenv("TICKWHEEL_DSN", "postgresql://x@db:5432/y")
    monkeypatch.setenv("TICKWHEEL_SHARDS", "128")
    monkeypatch.setenv("TICKWHEEL_PRIORITY_WEIGHTS", '{"high": 8, "normal": 2, "low": 1}')
    s = load_settings()
    assert s.effective_dsn == "postgresql://x@db:5432/y"
    assert s.shards == 128
    assert s.priority_weights["high"] == 8


def test_toml_file_below_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """the TOML file sets values the environment does not, and the environment wins"""
    cfg = tmp_path / "tickwheel.toml"
    cfg.write_text('tick_ms = 250\nshards = 16\ntopic_prefix = "acme"\n')
    monkeypatch.setenv("TICKWHEEL_CONFIG", str(cfg))
    monkeypatch.setenv("TICKWHEEL_SHARDS", "32")
    s = load_settings()
    assert (s.tick_ms, s.shards, s.topic_prefix) == (250, 32, "acme")


def test_missing_config_file_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """a TICKWHEEL_CONFIG that is not a file is refused with its path"""
    monkeypatch.setenv("TICKWHEEL_CONFIG", "/nonexistent/tw.toml")
    with pytest.raises(ConfigError, match=r"/nonexistent/tw\.toml"):
        load_settings()


@pytest.mark.parametrize(
    ("var", "value", "needle"),
    [
        ("TICKWHEEL_SHARDS", "0", "TICKWHEEL_SHARDS"),
        ("TICKWHEEL_TICK_MS", "soon", "TICKWHEEL_TICK_MS"),
        ("TICKWHEEL_TOPIC_PREFIX", "bad prefix!", "TICKWHEEL_TOPIC_PREFIX"),
        ("TICKWHEEL_PRIORITY_WEIGHTS", '{"high": 1}', "high, normal and low"),
    ],
)
def test_bad_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, needle: str
) -> None:
    """a bad value is one ConfigError sentence naming the variable or the allowed form"""
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=needle):
        load_settings()


def test_redact_dsn_hides_only_the_password() -> None:
    """DSNs in messages and status lines never show a password"""
    from tickwheel.config import redact_dsn

    assert redact_dsn("postgresql://app:s3cret@db:5432/x") == "postgresql://app:***@db:5432/x"
    assert redact_dsn("postgresql://app@db/x") == "postgresql://app@db/x"
