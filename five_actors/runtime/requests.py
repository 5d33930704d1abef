"""The asks and watches in flight over a node's links, each bound to the node it concerns.

A reply or error may answer only an ask sent to the node on whose link it came; a `down` may
fire only a watch of an actor on that node. A lost link fails that node's asks with ActorDown,
fires its watches with "link_lost" and drops the watches it had asked of this node.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import structlog

from five_actors.errors import ActorDown
from five_actors.runtime.actor import Reply

log = structlog.get_logger("five_actors.runtime")


class Requests:
    """Pending asks (id -> node, reply), watches made here (id -> node, address, callback) and watches served
    here for peers ((peer, id) -> unwatch)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._asks: dict[int, tuple[str, Reply]] = {}
        self._ask_ids: dict[Reply, int] = {}
        self._watches: dict[int, tuple[str, str, Callable[[str], None]]] = {}
        self._served: dict[tuple[str, int], Callable[[], None]] = {}

    def ask(self, node: str, reply: Reply) -> int:
        """Register an ask of `node`; its frame id."""
        id_ = next(self._ids)
        self._asks[id_] = (node, reply)
        self._ask_ids[reply] = id_
        return id_

    def waiting(self) -> int:
        """How many asks still wait for a reply."""
        return len(self._asks)

    def forget(self, id_: int) -> Reply | None:
        entry = self._asks.pop(id_, None)
        if entry is None:
            return None
        self._ask_ids.pop(entry[1], None)
        return entry[1]

    def cancel(self, reply: Reply) -> None:
        """The asker stopped waiting."""
        id_ = self._ask_ids.get(reply)
        if id_ is not None:
            self.forget(id_)

    def answered(self, peer: str, id_: object) -> Reply | None:
        """The pending ask that a reply or error from `peer` answers: only the node it was asked of may answer it."""
        entry = self._asks.get(id_)  # type: ignore[call-overload]
        if entry is None or entry[0] != peer:
            if entry is not None:
                reason = f"ask {id_} was sent to {entry[0]}, not {peer}"
                log.warning("frame_refused", peer=peer, kind="reply", id=id_, reason=reason)
            return None
        return self.forget(id_)  # type: ignore[arg-type]

    def watch(self, node: str, address: str, callback: Callable[[str], None]) -> int:
        """Register a watch of `address` on `node`; its frame id."""
        id_ = next(self._ids)
        self._watches[id_] = (node, address, callback)
        return id_

    def unwatch(self, id_: int) -> bool:
        """Drop a watch made here; False when it had fired or been dropped already."""
        return self._watches.pop(id_, None) is not None

    def fire(self, id_: int, reason: str) -> None:
        entry = self._watches.pop(id_, None)
        if entry is not None:
            entry[2](reason)

    def down(self, peer: str, id_: int, reason: str) -> None:
        """A `down` frame from `peer`: fire the watch if it is of an actor on `peer`."""
        watch = self._watches.get(id_)
        if watch is not None and watch[0] != peer:
            log.warning(
                "frame_refused", peer=peer, kind="down", id=id_, reason=f"watch {id_} is of {watch[1]}, not on {peer}"
            )
            return
        self.fire(id_, reason)

    def serve(self, peer: str, id_: int, unwatch: Callable[[], None]) -> None:
        """Keep a watch this node serves for `peer` (`unwatch` ends it)."""
        self._served[(peer, id_)] = unwatch

    def served(self, peer: str, id_: int) -> Callable[[], None] | None:
        """Take a served watch out (it fired, or the peer unwatched): its unwatch, or None."""
        return self._served.pop((peer, id_), None)

    def fail(self, peer: str, reason: str) -> None:
        """`peer`'s link is lost: its asks fail, its actors' watches fire, the watches it asked of us end."""
        for id_ in [i for i, (node, _) in self._asks.items() if node == peer]:
            reply = self.forget(id_)
            if reply is not None:
                reply(None, ActorDown(f"link to node {peer} lost ({reason})"))
        for id_ in [i for i, (node, _, _) in self._watches.items() if node == peer]:
            self.fire(id_, "link_lost")
        for key in [k for k in self._served if k[0] == peer]:
            self._served.pop(key)()
