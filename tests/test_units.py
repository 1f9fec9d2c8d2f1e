"""Sizes in human units: exact bytes, and one-line errors naming the key."""

from __future__ import annotations

import pytest

from prefixsim import ParameterError
from prefixsim.units import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64GiB", 64 * 1024**3),  # 68,719,476,736
        ("1TiB", 1024**4),  # 1,099,511,627,776
        ("16 GiB", 16 * 2**30),  # a space before the unit is fine
        ("500GB", 500 * 10**9),  # decimal
        ("2kB", 2000),
        ("2KB", 2000),
        ("3KiB", 3072),
        ("1.5TiB", 3 * 2**39),  # 1.5 * 2**40, a whole number of bytes
        ("0.1GB", 100_000_000),  # exact fraction, not 0.1 as a float
        ("4096", 4096),  # bare number: bytes
        ("4096B", 4096),
        (4096, 4096),  # an int from YAML
        ("0", 0),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size("cache_size", text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "64Gb",
            "Gb is in bits: bytes are GB (decimal) or GiB (binary)",
        ),  # gigabits: the B must be upper case
        ("64Gib", "in bits"),
        ("-1GiB", "cannot be negative"),
        ("1.5B", "not a whole number of bytes"),
        ("0.3KiB", "not a whole number of bytes"),  # 307.2 bytes
        ("64gib", "in bits"),
        ("64GIB", "did you mean GiB"),
        ("64XB", "unknown unit 'XB'"),
        ("lots", "expected a size"),
        ("", "expected a size"),
        ("9EiB", "too large"),  # 9 * 2**60 > 2**63 - 1
        (True, "expected a size"),
    ],
)
def test_parse_size_errors(text: str | bool, fragment: str) -> None:
    with pytest.raises(ParameterError, match="cache_size") as info:
        parse_size("cache_size", text)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_format_size() -> None:
    assert format_size(64 * 2**30) == "64 GiB"
    assert format_size(3 * 2**39) == "1.5 TiB"
    assert format_size(160 * 2**20) == "160 MiB"
    assert format_size(100) == "100 B"
