"""The `[node]` config section: defaults, and bad values refused with the key named."""

from __future__ import annotations

import pytest

from five_actors.config import Config, from_mapping
from five_actors.errors import ConfigError
from five_actors.runtime.config import NodeConfig


def test_defaults_listen_on_loopback_8780() -> None:
    config = from_mapping(Config, {})
    assert config.node == NodeConfig()
    assert (config.node.host, config.node.port) == ("127.0.0.1", 8780)


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"port": 70000}, "node: port must be in 0..65535, got 70000"),
        ({"heartbeat_s": 0}, "node: heartbeat_s must be positive"),
        (
            {"reconnect_min_s": 2.0, "reconnect_max_s": 1.0},
            "node: reconnect_max_s \\(1.0\\) must be >= reconnect_min_s",
        ),
        ({"max_message_bytes": 10}, "node: max_message_bytes must be at least 1024"),
        ({"port": "eighty"}, "node.port: expected an integer"),
        ({"colour": "red"}, "node.colour: unknown key"),
    ],
)
def test_bad_values_name_the_key(node: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_mapping(Config, {"node": node})
