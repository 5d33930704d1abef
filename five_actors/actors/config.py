"""The `[training]` config section: the settings the five actors share.

Every actor of the training tree reads it from its TreeContext (`self.context.config.training`),
which the supervisor sets before the actor starts; process children load the run's resolved
config from RUN_DIR/config.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from five_actors.errors import ConfigError, FiveActorsError

if TYPE_CHECKING:
    from five_actors.config import Config
    from five_actors.runtime.actor import Actor


def run_settings(
    actor: Actor, config: Config | None = None, run_dir: str | Path | None = None
) -> tuple[Config, Path | None]:
    """An actor's run config and run dir: its own arguments first, else its supervisor's TreeContext.

    An actor with neither a config argument nor a context that carries one is refused (ConfigError): it would
    otherwise train on defaults that are not the run's."""
    context = actor.context
    found = config if config is not None else getattr(context, "config", None)
    if found is None:
        raise ConfigError(
            f"{type(actor).__name__} at {actor.ref.path} has no run config: pass config=, or start it under a "
            "supervisor (its context carries the run's)"
        )
    where = run_dir if run_dir not in (None, "") else getattr(context, "run_dir", None)
    return found, None if where is None else Path(where)


def limit_torch_threads(device: str, threads: int) -> None:
    """Give this process `threads` torch intra-op threads when it computes on the CPU (0: torch's default, one per
    core). Processes that share the cores lose badly to more: idle intra-op threads spin, and on 2 cores an eval
    round on torch's default took twice the CPU time of one thread for the same wall time."""
    if device == "cpu" and threads:
        import torch

        torch.set_num_threads(threads)


@dataclass(frozen=True)
class TrainingConfig:
    """How the five actors play, batch and train (DESIGN.md "The five actors and one training step")."""

    seed: int = 0
    """Base random seed; each actor derives its own from it and its path."""
    games_per_actor: int = 4
    """Lane games each GameActor steps as one batch."""
    rollout_chunk_steps: int = 16
    """Steps T per rollout chunk (and per BPTT segment on the learner)."""
    gae_window: int = 16
    """Steps after a chunk that GAE looks ahead before bootstrapping from the value there."""
    past_opponent_share: float = 0.2
    """Share of games whose team 1 plays a past version from the opponent pool (paper: 20%)."""
    opponent_draw_games: int = 0
    """Past-opponent games of a GameActor that one draw from the pool serves before the next draw (0: as many as the
    actor plays at once, games_per_actor x past_opponent_share rounded up; 1: a draw per game, as the paper). Each
    game still meets version i with the pool's probability; fewer versions in play at once make fewer, larger
    forward passes on the inference actor, one per version a batch holds."""
    inference_batch_rows: int = 256
    """An InferenceActor runs a forward pass once this many rows are waiting..."""
    inference_deadline_ms: float = 2.0
    """...or once the oldest waiting request is this old."""
    inference_torch_threads: int = 1
    """Torch intra-op threads of an InferenceActor's and the EvalActor's process on the CPU (0: torch's default; their
    small batches run best on 1)."""
    learner_torch_threads: int = 1
    """Torch intra-op threads of a LearnerActor's process on the CPU (0: torch's default; learners sharing cores run
    best on 1)."""
    inference_cache_versions: int = 64
    """Past policy versions an InferenceActor keeps in memory (LRU) for opponent rows. As many as
    the opponent pool holds: with fewer, the games' past opponents outnumber the cache once the
    pool grows, and every batch fetches versions again (with 4, throughput fell 5x within minutes)."""
    infer_timeout_s: float = 10.0
    """How long a GameActor waits for an InferReply before retrying (the steps are counted lost)."""
    buffer_chunks: int = 256
    """Rollout chunks the learner's buffer holds; the oldest are dropped (and counted) when full."""
    minibatch_chunks: int = 32
    """Chunks per learner minibatch (one optimizer step)."""
    publish_every: int = 4
    """Optimizer steps between two parameter versions sent to the ParamServer (K)."""
    max_staleness: int = 4
    """Chunks played by a version older than latest - max_staleness are dropped (counted), not trained on."""
    max_sample_reuse: float = 2.0
    """Most times a chunk is trained on, on average; the learner waits for fresh data beyond it."""
    max_outstanding_chunks: int = 0
    """Backpressure: the most chunks of one GameActor that one learner holds untrained (in flight, or waiting unused
    in its buffer). A GameActor waits before its next step while its next ship (a chunk for each row) would take the
    learner it goes to past this, until that learner's ChunkFates report chunks trained or dropped; a ship larger
    than the limit waits until the learner holds none (0: never waits). Rollouts then run no faster than the learners
    train, as Sample Factory's finite trajectory buffers make them: no chunk is evicted unused, and staleness stays
    low. At least `minibatch_chunks`, or a learner could wait for a minibatch that its game actors hold back."""
    reuse_window_s: float = 30.0
    """Seconds over which sample reuse (samples consumed / samples produced) is measured."""
    allreduce_timeout_s: float = 60.0
    """How long a learner waits on its peers in a collective before failing (its group then restarts)."""
    checkpoint_every: int = 10
    """The ParamServer writes a checkpoint every this many versions (and on stop)."""
    keep_checkpoints: int = 3
    """Latest checkpoints kept on disk; opponent-pool members' checkpoints are kept as well."""
    pool_add_every: int = 10
    """Every this many versions, the latest joins the opponent pool."""
    pool_max_versions: int = 64
    """Most versions in the opponent pool; beyond it the least likely one (lowest q) leaves."""
    pool_eta: float = 0.01
    """Step size of the pool's quality scores (p_i proportional to exp(q_i))."""
    eval_every_s: float = 60.0
    """Seconds between two evaluation rounds of the EvalActor."""
    eval_games: int = 16
    """Games per opponent in one evaluation round."""
    eval_scripted_games: int = 0
    """Games against the scripted bot in one round of the lane game (0: `eval_games`). The bar's reference: more games
    narrow its 95% interval (8 of 8 is [0.68, 1.00], 24 of 24 [0.86, 1.00])."""
    eval_past_versions: int = 2
    """Frozen past versions the EvalActor also plays in each round (besides the random and scripted bots)."""
    surgery_anneal_versions: int = 100
    """Parameter versions over which a live surgery's added action types and new game version grow from 0 to all
    games."""
    surgery_lr_hold_steps: int = 32
    """Optimizer steps after a live surgery with the learning rate at 0, so that Adam's moments of the
    new weights settle before they move (the paper held it at 0 for a while; fresh moments would give
    the new weights about three times the step size of the old ones)."""
    surgery_schedule: dict[str, str] = field(default_factory=dict)
    """Surgeries the ParamServer makes by itself, as `five-actors surgery` would: parameter version -> operations
    (`+` between them), e.g. `{600 = "game-size 5 3"}` grows a run started on a small game to the full one at version
    600 (a curriculum). Each runs once the latest version reaches its key; a resumed run tries again the ones it has
    passed, and the operations refuse what the model already has."""
    surgery_revert_trueskill: float = 5.0
    """A change being annealed in goes back to share 0 when the latest version's TrueSkill falls this far below its
    value at the surgery."""
    stall_s: float = 120.0
    """Seconds without progress (no new version, a learner training no chunk, a game making no env step) before the
    head reports training stalled: /health 503 and `training_stalled` (five_actors.supervisor.watchdog); 0: never."""
    stall_restart: bool = True
    """Whether the head restarts a stalled part (the learners, or the game actor) under its supervisor."""
    rendezvous_host: str = "127.0.0.1"
    """Host of the learners' torch.distributed rendezvous (learner rank 0's host)."""
    rendezvous_port: int = 0
    """Port of the learners' rendezvous; 0: `up` picks a free one and writes it into RUN_DIR/config.json."""

    def __post_init__(self) -> None:
        at_least_one = (
            "games_per_actor",
            "rollout_chunk_steps",
            "inference_batch_rows",
            "inference_cache_versions",
            "buffer_chunks",
            "minibatch_chunks",
            "publish_every",
            "checkpoint_every",
            "keep_checkpoints",
            "pool_add_every",
            "eval_games",
            "pool_max_versions",
            "surgery_anneal_versions",
        )
        for name in at_least_one:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in (
            "gae_window",
            "max_staleness",
            "eval_past_versions",
            "eval_scripted_games",
            "inference_deadline_ms",
            "inference_torch_threads",
            "learner_torch_threads",
            "surgery_revert_trueskill",
            "surgery_lr_hold_steps",
            "stall_s",
            "max_outstanding_chunks",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.past_opponent_share <= 1.0:
            raise ValueError(f"past_opponent_share must be within [0, 1], got {self.past_opponent_share}")
        if self.opponent_draw_games < 0:
            raise ValueError(f"opponent_draw_games must not be negative (0: automatic), got {self.opponent_draw_games}")
        for name in (
            "infer_timeout_s",
            "max_sample_reuse",
            "pool_eta",
            "eval_every_s",
            "reuse_window_s",
            "allreduce_timeout_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_outstanding_chunks and self.max_outstanding_chunks < self.minibatch_chunks:
            raise ValueError(
                f"max_outstanding_chunks ({self.max_outstanding_chunks}) must be 0 (no backpressure) or at least "
                f"minibatch_chunks ({self.minibatch_chunks}): a learner waits for a whole minibatch"
            )
        if self.minibatch_chunks > self.buffer_chunks:
            raise ValueError(
                f"minibatch_chunks ({self.minibatch_chunks}) must not exceed buffer_chunks ({self.buffer_chunks})"
            )
        self._check_surgery_schedule()
        if not 0 <= self.rendezvous_port <= 65535:
            raise ValueError(f"rendezvous_port must be in 0..65535, got {self.rendezvous_port}")

    def _check_surgery_schedule(self) -> None:
        from five_actors.surgery.ops import OPERATIONS, parse_ops

        for at, words in self.surgery_schedule.items():
            if not at.isdigit():
                raise ValueError(f"surgery_schedule: {at!r} is not a parameter version (a whole number)")
            try:
                ops = parse_ops(words.split())
            except FiveActorsError as exc:
                raise ValueError(f"surgery_schedule.{at}: {exc}") from None
            unknown = [op.name for op in ops if op.name not in OPERATIONS]
            if unknown:
                raise ValueError(
                    f"surgery_schedule.{at}: unknown operation {unknown[0]!r} (known: {', '.join(sorted(OPERATIONS))})"
                )
