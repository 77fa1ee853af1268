"""What the operators' page may show of an HTTP target (registry_api/ops/views.py), pure."""

from __future__ import annotations

import pytest

from tickwheel.registry_api.ops.views import HIDDEN, like_pattern, redacted_target

pytestmark = pytest.mark.unit


def test_header_values_query_and_credentials_are_hidden() -> None:
    target = {
        "url": "https://user:pw@api.example.com:8443/hook/a?token=s3cret&x=1#frag",
        "method": "POST",
        "headers": {"Authorization": "Bearer s3cret", "X-Trace": "abc"},
        "timeout_ms": 5000,
    }
    shown = redacted_target(target)
    assert shown == {
        "url": f"https://api.example.com:8443/hook/a?{HIDDEN}",
        "method": "POST",
        "headers": {"Authorization": HIDDEN, "X-Trace": HIDDEN},
        "timeout_ms": 5000,
    }
    assert "s3cret" not in repr(shown) and "pw" not in repr(shown)
    assert target["headers"]["Authorization"] == "Bearer s3cret"  # the input is not changed


def test_a_plain_url_and_no_headers_stay_as_they_are() -> None:
    target = {"url": "https://api.example.com/hook", "method": "GET"}
    assert redacted_target(target) == {**target, "headers": {}}


def test_an_error_piece_is_matched_as_text() -> None:
    assert like_pattern("timeout") == "%timeout%"
    assert like_pattern("50%_off\\x") == "%50\\%\\_off\\\\x%"
