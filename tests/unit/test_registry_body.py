"""Request body decoding (registry_api/body.py): UTF-8 JSON only, unique names, exact ints."""

from __future__ import annotations

import pytest

from tickwheel.registry_api.body import BodyError, decode_json_body

pytestmark = pytest.mark.unit

DOC = '{"id": "x", "payload": {"n": 123456789012345678901234567890, "s": "é"}}'


def test_utf8_json_decodes_with_exact_integers() -> None:
    """a UTF-8 body decodes, big integers exact and non-ASCII text intact"""
    value = decode_json_body(DOC.encode())
    assert value["payload"] == {"n": 123456789012345678901234567890, "s": "é"}


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (DOC.encode("utf-16"), "UTF-16"),
        (DOC.encode("utf-16-le"), "NUL bytes"),
        (DOC.encode("utf-16-be"), "NUL bytes"),
        (DOC.encode("utf-32"), "UTF-32"),
        (DOC.encode("utf-32-le"), "NUL bytes"),
        (DOC.encode("utf-8-sig"), "byte order mark"),
        (DOC.encode("latin-1"), r"not UTF-8 \(invalid byte at position"),
        (b'{"id": "\xed\xa0\x80"}', "not UTF-8"),
    ],
)
def test_anything_but_utf8_is_refused(raw: bytes, words: str) -> None:
    """UTF-16/32 (with or without a BOM), a UTF-8 BOM and invalid UTF-8 are refused"""
    with pytest.raises(BodyError, match=words):
        decode_json_body(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id": "a", "id": "b"}',
        b'{"payload": {"k": 1, "k": 1}}',
        b'[{"a": 1}, {"b": {"c": 1, "c": 2}}]',
    ],
)
def test_duplicate_names_are_refused_at_any_depth(raw: bytes) -> None:
    """an object naming a key twice is refused, wherever it is"""
    with pytest.raises(BodyError, match="twice in one object"):
        decode_json_body(raw)


@pytest.mark.parametrize("raw", [b'{"n": NaN}', b'{"n": Infinity}', b'{"n": -Infinity}'])
def test_non_json_numbers_are_refused(raw: bytes) -> None:
    """NaN and Infinity are not JSON"""
    with pytest.raises(BodyError, match="not a JSON number"):
        decode_json_body(raw)


def test_malformed_json_names_the_position() -> None:
    """a syntax error says what and where"""
    with pytest.raises(BodyError, match=r"not valid JSON: .* at character 7"):
        decode_json_body(b'{"id": }')


def test_absurd_nesting_is_a_body_error() -> None:
    """nesting past the parser's recursion limit is refused, never a RecursionError"""
    with pytest.raises(BodyError, match="nests too deeply"):
        decode_json_body(b"[" * 100_000 + b"]" * 100_000)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"payload": {"n": ' + b"7" * 4301 + b"}}", "payload.n"),
        (b'{"payload": {"list": [1, -' + b"9" * 100_000 + b"]}}", "payload.list.1"),
        (b'{"from": ' + b"1" * 5000 + b', "to": "2026-01-01T00:00:00Z"}', "from"),
        (b"1" * 4301, ""),
    ],
)
def test_an_integer_past_the_interpreters_digit_limit_is_a_body_error_naming_it(
    raw: bytes, field: str
) -> None:
    """issue 28 finding 5: an integer of 4,301+ digits is a BodyError naming its field, never
    the interpreter's ValueError (a 500)"""
    with pytest.raises(BodyError, match=r"integer of [\d,]+ digits") as caught:
        decode_json_body(raw)
    assert caught.value.field == field


def test_an_integer_at_the_digit_limit_still_decodes_exactly() -> None:
    """4,300 digits is an integer like any other (validation then refuses it by range)"""
    assert decode_json_body(b"[-" + b"9" * 4300 + b"]") == [-int("9" * 4300)]
