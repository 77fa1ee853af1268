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


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("postgres://app:s3cret@db/x?sslmode=require", "postgres://app:***@db/x?sslmode=require"),
        ("postgresql://app@db/x?password=s3cret", "postgresql://app@db/x?password=***"),
        (
            "postgresql://app@db/x?sslmode=require&PassWord=s3cret&application_name=a",
            "postgresql://app@db/x?sslmode=require&PassWord=***&application_name=a",
        ),
        ("postgresql://db/x?sslpassword=s3cret", "postgresql://db/x?sslpassword=***"),
        ("host=db password=s3cret dbname=x", "host=db password=*** dbname=x"),
        ("host=db password = 's3 c\\'ret' dbname=x", "host=db password = *** dbname=x"),
        ("sslpassword=s3cret host=db", "sslpassword=*** host=db"),
        (
            "postgresql://app:s3cret@db1:5432,db2:5433/x?target_session_attrs=read-write",
            "postgresql://app:***@db1:5432,db2:5433/x?target_session_attrs=read-write",
        ),
        ("postgresql://app:s3cret@[::1]:5432/x", "postgresql://app:***@[::1]:5432/x"),
        ("postgresql://app:s3@cr/et?@db/x", "postgresql://app:***@db/x"),
        ("postgresql://app:s3cret@[::1/x", "postgresql://app:***@[::1/x"),
    ],
    ids=[
        "userinfo",
        "userinfo-scheme-postgres",
        "query",
        "query-any-case",
        "query-sslpassword",
        "keyword-value",
        "keyword-value-quoted",
        "keyword-value-sslpassword",
        "multi-host",
        "ipv6",
        "unencoded-at-slash-question",
        "unparsable",
    ],
)
def test_redact_dsn_hides_the_password_in_every_form(dsn: str, shown: str) -> None:
    """issue 28 finding 7: one function redacts a DSN's password in each form it can take —
    userinfo, query (?password=, &sslpassword=), keyword/value (quoted or not), multi-host,
    IPv6, and one that does not parse — and leaves the rest readable"""
    from tickwheel.config import redact_dsn

    assert redact_dsn(dsn) == shown
    assert "s3" not in redact_dsn(dsn)


@pytest.mark.parametrize(
    ("var", "value", "words"),
    [
        ("TICKWHEEL_DSN", "host=db password=s3cret", "keyword/value form"),
        ("TICKWHEEL_DSN", "mysql://a:s3cret@db/x", "postgresql:// URL"),
        ("TICKWHEEL_DSN", "postgresql://a:s3cret@db:port/x", "port 'port'"),
        ("TICKWHEEL_DSN", "postgresql://a:s3cret@[::1/x", "Invalid IPv6 URL"),
        ("TICKWHEEL_ZK", "::::", "port is not a number"),
        ("TICKWHEEL_KAFKA", "broker:9092,other:x", "'other:x'"),
        ("TICKWHEEL_TARGET_ALLOWLIST", "https://hooks.example.com/", "must be a JSON list"),
        ("TICKWHEEL_PRIORITY_WEIGHTS", "high=6", "must be a JSON object"),
    ],
)
def test_malformed_addresses_and_json_settings_are_config_errors_without_secrets(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, words: str
) -> None:
    """issue 28 (low): a DSN, Kafka or ZooKeeper address that no client can use, or a JSON
    setting that is not JSON, is a ConfigError naming the variable (never a traceback from
    deep inside a client), and no password is quoted"""
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=var) as caught:
        load_settings()
    assert words in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_a_config_file_that_is_not_toml_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """issue 28 (low): a TICKWHEEL_CONFIG that does not parse is named, not a traceback"""
    cfg = tmp_path / "tw.toml"
    cfg.write_text("shards = [\n")
    monkeypatch.setenv("TICKWHEEL_CONFIG", str(cfg))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings()


@pytest.mark.parametrize(
    ("entries", "words"),
    [
        ('["https://hooks.example.com/ 10.0.0.0/33"]', "not an address range"),
        ('["hooks.example.com"]', "absolute http(s) URL"),
        ('[""]', "empty entry"),
    ],
)
def test_an_allowlist_entry_that_allows_nothing_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, entries: str, words: str
) -> None:
    """an allowlist entry that is no URL, or names something that is not an address range,
    is refused when the settings are read (it silently allowed nothing before)"""
    monkeypatch.setenv("TICKWHEEL_TARGET_ALLOWLIST", entries)
    with pytest.raises(ConfigError, match="TICKWHEEL_TARGET_ALLOWLIST") as caught:
        load_settings()
    assert words in str(caught.value)


def test_an_allowlist_entry_may_name_private_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """`URL RANGE…` is an entry"""
    monkeypatch.setenv(
        "TICKWHEEL_TARGET_ALLOWLIST", '["https://billing.internal/hooks 10.20.0.0/16 fd12::/48"]'
    )
    assert load_settings().target_allowlist == [
        "https://billing.internal/hooks 10.20.0.0/16 fd12::/48"
    ]


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ('{"https://gw.example/": {"rate_per_s": 5, "burst": 1}}', "a key is a host name"),
        ('{"gw.example": {"rate_per_s": 0, "burst": 1}}', "rate_per_s"),
        ('{"gw.example": {"rate_per_s": 5, "burst": 0}}', "burst"),
        ('{"gw.example": {"burst": 5}}', "rate_per_s"),
        ('{"gw.example": {"rate_per_s": 5, "burst": 1, "extra": 1}}', "extra"),
    ],
)
def test_a_target_limit_that_names_no_host_or_no_rate_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, limits: str, words: str
) -> None:
    """TICKWHEEL_TARGET_LIMITS keys are host[:port], values a positive rate and burst"""
    monkeypatch.setenv("TICKWHEEL_TARGET_LIMITS", limits)
    with pytest.raises(ConfigError, match="TICKWHEEL_TARGET_LIMITS") as caught:
        load_settings()
    assert words.upper() in str(caught.value).upper()


def test_target_limit_keys_ignore_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """a host named in capitals is the host a URL names in lower case"""
    monkeypatch.setenv(
        "TICKWHEEL_TARGET_LIMITS", '{"GW.Example:8443": {"rate_per_s": 500, "burst": 50}}'
    )
    (key,) = load_settings().target_limits
    assert key == "gw.example:8443"
