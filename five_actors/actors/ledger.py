"""A GameActor's ledger of the chunks it made: each one's fate, across learner restarts.

The GameActor owns a chunk from the moment it makes it until a learner reports what became of
it (ChunkFates: trained, refused, dropped as stale, dropped by an architecture change, evicted
unused). While no fate has come back the chunk is outstanding in the learner it was told to
(in flight, or waiting in that learner's buffer). When that learner exits (kill -9 included),
its outstanding chunks are counted lost: whatever it held died with it. So at every moment

    made == trained + refused + dropped_stale + dropped_arch + evicted_unused + outstanding + lost

and, whenever no chunk or ChunkFates is in flight, `outstanding` equals the chunks the live
learners hold unused: a figure they count themselves (their `chunks_waiting`), which is what
makes the ledger checkable from outside.

A learner's last ChunkFates travels on the same link as the news of its exit and so arrives
first; should fates of a learner incarnation come after its exit was counted (a link lost while
the process lives on), they move those chunks from lost to their fate.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from five_actors.actors.messages import ChunkFates

FATES = ("trained", "refused", "dropped_stale", "dropped_arch", "evicted_unused")
"""What a learner reports of a chunk, in ChunkFates' field order."""


class ChunkLedger:
    """Chunks by fate for one GameActor; `made` counts chunks that left the game for a learner or were lost
    on the way (no learner up)."""

    def __init__(self) -> None:
        self.made = 0
        self.sent_total = 0
        self.fates: Counter[str] = Counter()
        self.lost = 0
        """Chunks that reached no learner (none up), or whose learner exited before reporting their fate."""
        self.outstanding: Counter[str] = Counter()
        """Chunks told to each learner address with no fate reported yet."""
        self._incarnation: dict[str, str] = {}
        """The incarnation each learner address last reported from."""
        self._exited: set[str] = set()
        """Incarnations whose outstanding chunks were counted lost."""

    def sent(self, learner: str, chunks: int) -> None:
        """Chunks told to `learner`."""
        self.made += chunks
        self.sent_total += chunks
        self.outstanding[learner] += chunks

    def unsent(self, chunks: int) -> None:
        """Chunks made while no learner was up."""
        self.made += chunks
        self.lost += chunks

    def report(self, msg: ChunkFates) -> str | None:
        """Take a learner's fates; returns why they were refused (None when taken)."""
        counts = {name: getattr(msg, name) for name in FATES}
        if any(n < 0 for n in counts.values()):
            return f"negative counts {counts}"
        total = sum(counts.values())
        if msg.incarnation in self._exited:
            if total > self.lost:
                return f"{total} late fates from exited incarnation {msg.incarnation}, but only {self.lost} lost"
            self.lost -= total
        else:
            if total > self.outstanding[msg.learner]:
                return f"{total} fates, but only {self.outstanding[msg.learner]} chunks outstanding in {msg.learner}"
            self._incarnation[msg.learner] = msg.incarnation
            self.outstanding[msg.learner] -= total
        self.fates.update(counts)
        return None

    def exited(self, learner: str) -> int:
        """`learner` exited: its outstanding chunks are lost. Returns how many."""
        lost = self.outstanding.pop(learner, 0)
        self.lost += lost
        incarnation = self._incarnation.pop(learner, None)
        if incarnation is not None:
            self._exited.add(incarnation)
        return lost

    def stats(self) -> dict[str, Any]:
        """The ledger as GameActor metrics (`chunks_` names)."""
        return {
            "chunks_made": self.made,
            "chunks_sent": self.sent_total,
            **{f"chunks_{name}": self.fates[name] for name in FATES},
            "chunks_outstanding": sum(self.outstanding.values()),
            "chunks_lost": self.lost,
        }
