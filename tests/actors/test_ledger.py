"""The chunk ledger: a learner reports each chunk's fate to the actor that made it, and that actor's ledger counts
a learner's unreported chunks lost when it exits. (The same across a kill -9 in a real tree:
tests/actors/test_learner_group.py.)"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from five_actors.actors.learner import LearnerActor
from five_actors.actors.ledger import FATES, ChunkLedger
from five_actors.actors.messages import ChunkFates, GetStats
from five_actors.bench.learning import synthetic_rollout, tiny_config
from five_actors.runtime.actor import Actor, ActorSystem

pytestmark = pytest.mark.timeout(120)

A, B = "node/learner-0", "node/learner-1"


def test_every_chunk_is_outstanding_fated_or_lost_and_late_fates_of_an_exited_learner_are_moved_back() -> None:
    ledger = ChunkLedger()
    ledger.sent(A, 10)
    ledger.sent(B, 6)
    ledger.unsent(3)  # no learner was up
    assert ledger.report(ChunkFates(A, "a1", trained=4, evicted_unused=1)) is None
    assert ledger.report(ChunkFates(B, "b1", refused=2)) is None
    assert ledger.exited(A) == 5  # the 5 chunks A held with no fate reported died with it
    stats = ledger.stats()
    assert stats["chunks_made"] == 19 and stats["chunks_sent"] == 16 and stats["chunks_outstanding"] == 4
    assert stats["chunks_lost"] == 3 + 5 and stats["chunks_trained"] == 4 and stats["chunks_refused"] == 2
    assert stats["chunks_made"] == sum(stats[f"chunks_{n}"] for n in (*FATES, "outstanding", "lost"))
    # A link lost while the process lived on: its later report moves chunks from lost to their fate.
    assert ledger.report(ChunkFates(A, "a1", trained=2)) is None
    assert ledger.stats()["chunks_lost"] == 6 and ledger.stats()["chunks_trained"] == 6
    # The restarted learner at the same address starts from nothing outstanding.
    ledger.sent(A, 2)
    assert ledger.report(ChunkFates(A, "a2", trained=2)) is None
    stats = ledger.stats()
    assert stats["chunks_made"] == sum(stats[f"chunks_{n}"] for n in (*FATES, "outstanding", "lost")) == 21


@pytest.mark.parametrize(
    ("fates", "why"),
    [
        (ChunkFates(A, "a1", trained=-1), "negative counts"),
        (ChunkFates(A, "a1", trained=3), "3 fates, but only 2 chunks outstanding in node/learner-0"),
        (ChunkFates(B, "b1", dropped_stale=1), "1 fates, but only 0 chunks outstanding in node/learner-1"),
    ],
)
def test_a_report_of_more_fates_than_chunks_or_of_negative_counts_is_refused_and_changes_nothing(
    fates: ChunkFates, why: str
) -> None:
    ledger = ChunkLedger()
    ledger.sent(A, 2)
    before = ledger.stats()
    refused = ledger.report(fates)
    assert refused is not None and why in refused
    assert ledger.stats() == before


class Maker(Actor):
    """Stands in for the GameActor that made the chunks: keeps the ChunkFates it is told."""

    def __init__(self) -> None:
        self.reports: list[ChunkFates] = []

    async def on_chunk_fates(self, msg: ChunkFates) -> None:
        self.reports.append(msg)

    def total(self, name: str) -> int:
        return sum(getattr(r, name) for r in self.reports)


async def test_a_learner_tells_the_maker_of_its_chunks_each_fate_they_meet(system: ActorSystem) -> None:
    config = tiny_config(minibatch_chunks=4, buffer_chunks=8, max_sample_reuse=1.0, publish_every=1, max_staleness=1)
    maker = Maker()
    system.spawn(maker, "/maker")
    learner = LearnerActor(config=config)
    ref = system.spawn(learner, "/learner")
    assert await system.wait_started(ref) is None
    assert learner.spec is not None
    rollout = synthetic_rollout(learner.spec, 16, 4, 0, seed=1, source="test/maker")
    await ref.tell(rollout)  # trained once (reuse 1.0)
    await ref.tell(dataclasses.replace(rollout, arch="f" * 16))  # refused: another architecture
    await ref.tell(synthetic_rollout(learner.spec, 16, 12, 0, seed=2, source="test/maker"))  # 4 evicted, 8 wait
    async with asyncio.timeout(30):
        while True:
            stats = await ref.ask(GetStats())
            if sum(maker.total(name) for name in FATES) + stats["chunks_waiting"] == 20:
                break
            await asyncio.sleep(0.1)
    for name in FATES:
        assert maker.total(name) == stats[f"chunks_{name}"], name
    assert stats["chunks_refused"] == 4 and stats["chunks_trained"] >= 4 and stats["chunks_evicted_unused"] >= 1
    assert {r.learner for r in maker.reports} == {"test/learner"}
    assert len({r.incarnation for r in maker.reports}) == 1
