"""The `[node]` config section: where a node listens and how its links behave."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeConfig:
    """One node's network settings (the `[node]` table of a config file)."""

    host: str = "127.0.0.1"
    """Interface the node's HTTP and websocket server binds to."""

    advertise_host: str = ""
    """Address other nodes are told to reach this node at (its links' URL); empty: `host`, or this
    machine's hostname when `host` is a wildcard (0.0.0.0, ::). Process children of the node listen
    on the same interface and advertise the same address (with their own ports)."""

    port: int = 8780
    """TCP port of the node's server; 0 picks a free port (read it back from `node.port`)."""

    max_message_bytes: int = 64 * 1024 * 1024
    """Largest frame a link sends or accepts; a bigger one is refused with a clear error."""

    max_arrays_per_message: int = 4096
    """Most numpy arrays one frame may carry."""

    max_nesting_depth: int = 32
    """Deepest nesting of lists and maps a frame may carry."""

    heartbeat_s: float = 10.0
    """Seconds between websocket pings; a peer that sends no pong within half of this is dropped
    (so a process must not block its event loop that long, e.g. in a synchronous training step)."""

    connect_timeout_s: float = 5.0
    """Seconds one attempt to open a link may take (TCP connect, token check and hello)."""

    reconnect_min_s: float = 0.05
    """First delay before reconnecting a lost outbound link; it doubles on each failure."""

    reconnect_max_s: float = 5.0
    """Longest delay between reconnect attempts."""

    ask_timeout_s: float = 5.0
    """Default timeout of an ask made through the node."""

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("host must not be empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be at least 1024, got {self.max_message_bytes}")
        if self.max_arrays_per_message < 0:
            raise ValueError(f"max_arrays_per_message must be >= 0, got {self.max_arrays_per_message}")
        if not 2 <= self.max_nesting_depth <= 512:
            raise ValueError(f"max_nesting_depth must be in 2..512, got {self.max_nesting_depth}")
        for name in ("heartbeat_s", "connect_timeout_s", "reconnect_min_s", "reconnect_max_s", "ask_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.reconnect_max_s < self.reconnect_min_s:
            raise ValueError(
                f"reconnect_max_s ({self.reconnect_max_s}) must be >= reconnect_min_s ({self.reconnect_min_s})"
            )
