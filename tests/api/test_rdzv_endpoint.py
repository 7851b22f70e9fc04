"""``--rdzv-endpoint`` (issue 33): node 0's address as HOST:PORT, or a usage error (exit 2) naming the flag. HOST
is an IPv4 address, an IPv6 address in brackets or a host name; the port is 1 to 65535 in ASCII digits."""

from __future__ import annotations

import pytest

from embedcalc.api.distributed import Nodes
from embedcalc.errors import EmbedcalcError, ExitCode


@pytest.mark.parametrize(
    ("given", "kept"),
    [("10.0.0.1:29400", "10.0.0.1:29400"), ("[fd00::1]", "[fd00::1]:29400"), ("node0.cluster", "node0.cluster:29400"),
     ("localhost:1", "localhost:1"), ("[::1]:65535", "[::1]:65535")],
)  # fmt: skip
def test_addresses_are_kept(given: str, kept: str) -> None:
    assert Nodes(2, 1, given).endpoint == kept


@pytest.mark.parametrize(
    "given",
    ["[::1", "127.0.0.1:29400:1", "h:²", "h:" + "9" * 5000, "a" * 5000 + ":1", "::1", "999.1.1.1:1", "-h:1",
     "h:0", "h:65536", "h :1", "[::1]x", "[nothost]:1", "héllo:1", "", ":29400", "h:+1"],
)  # fmt: skip
def test_anything_else_is_a_usage_error_naming_the_flag(given: str) -> None:
    with pytest.raises(EmbedcalcError) as info:
        Nodes(2, 1, given)
    assert info.value.exit_code == ExitCode.USAGE
    assert info.value.message.startswith("--rdzv-endpoint") and len(info.value.message) < 400
