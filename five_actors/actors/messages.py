"""The messages the five actors exchange (issue 5's contract).

Arrays are numpy. Shapes use R = rows of an inference request (one row per hero played),
D = the flat observation width, H = the LSTM size, C = the action components, T = steps per
rollout chunk (`training.rollout_chunk_steps`) and B = chunks in one Rollout. `arch` is always
the ModelSpec hash of the network the arrays belong to: a receiver holding another
architecture refuses the message rather than mixing them.

Arrays that arrive over a link are read-only views of the frame: copy before writing.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

import numpy as np

from five_actors.runtime.actor import message


@message
class InferRequest:
    """GameActor -> InferenceActor (ask): act for R rows.

    obs f32[R,D]; masks {head: bool[R,...]}; versions i64[R] the policy version each row plays
    (-1 = the latest); arch the ModelSpec hash the asker expects. Answered with an InferReply.

    The inference actor holds each asker's rows' LSTM state between its requests, keyed by
    `stream` (the asker's address), so that a step carries observations and not the state:
    h, c f32[R,H] give the rows' state before this step (the asker sends them where it knows
    them: its first step, each chunk's first step, after a surgery), or are f32[0,H] to take the
    state the stream's previous step left, zeroed on the rows of `starts` bool[R] (an episode
    began). `seq` numbers the asker's steps: a step asked again (a retry after a timeout) starts
    from the state its first answer started from. A held state the actor does not have (it
    restarted, or another one served the previous step) is refused with StateUnavailable.
    `advance` false asks without moving the stream on (the value of rows whose episode a time
    limit cut, from the state their step left); `rows` i64[R] then names the stream's rows asked
    for (empty: all, in order). `want_state` asks for the state after this step in the reply.
    """

    obs: np.ndarray
    masks: dict[str, np.ndarray]
    h: np.ndarray
    c: np.ndarray
    versions: np.ndarray
    arch: str
    stream: str = ""
    seq: int = 0
    starts: np.ndarray | None = None
    rows: np.ndarray | None = None
    advance: bool = True
    want_state: bool = False


@message
class InferReply:
    """The answer to an InferRequest, row for row.

    actions i64[R,C]; logp f32[R] the log-probability of the sampled action; value f32[R];
    h, c f32[R,H] the LSTM state after this step where the request set `want_state` (f32[0,H]
    otherwise); versions i64[R] the version actually used per row (never -1);
    arch the ModelSpec hash of the model that acted.
    """

    actions: np.ndarray
    logp: np.ndarray
    value: np.ndarray
    h: np.ndarray
    c: np.ndarray
    versions: np.ndarray
    arch: str


@message
class Rollout:
    """GameActor -> a LearnerActor (tell, round-robin over learners): B chunks of T steps.

    Only rows played by the latest policy are shipped. versions i64[B] the policy version that
    produced each chunk; obs f32[T,B,D]; masks {head: bool[T,B,...]}; actions i64[T,B,C];
    logp, values, rewards f32[T,B]; dones bool[T,B] (the game ended after this step);
    starts bool[T,B] (this step is a game's first: the LSTM state was reset before it);
    advantages, returns f32[T,B] from GAE over a window with a bootstrap value; h, c f32[B,H]
    each chunk's LSTM state before its first step; made_at the sender's time.time().
    """

    source: str
    arch: str
    versions: np.ndarray
    obs: np.ndarray
    masks: dict[str, np.ndarray]
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    starts: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    h: np.ndarray
    c: np.ndarray
    made_at: float


@message
class ChunkFates:
    """LearnerActor -> the GameActor that made the chunks (tell, every FATES_EVERY_S while there is news): how
    many of its chunks met each fate since the last ChunkFates. `learner` is the learner's address,
    `incarnation` tells one run of its process from the next (a restarted learner has a new one).

    The GameActor's ChunkLedger owns each chunk it sent until a fate comes back: a chunk whose learner
    exits first is counted lost (five_actors.actors.ledger).
    """

    learner: str
    incarnation: str
    trained: int = 0
    refused: int = 0
    dropped_stale: int = 0
    dropped_arch: int = 0
    evicted_unused: int = 0


@message
class PublishParams:
    """Learner rank 0 -> ParamServer (tell) every `publish_every` optimizer steps.

    `spec` is the ModelSpec as a dict; `state` the policy's state_dict as numpy (normaliser
    buffers included); `learner_steps` the optimizer steps taken so far.
    """

    version: int
    arch: str
    spec: dict[str, Any]
    state: dict[str, np.ndarray]
    learner_steps: int


@message
class GetParams:
    """Ask the ParamServer for a version's parameters (-1 = the latest); replied with Params.

    An unknown version is refused with a RemoteError naming it.
    """

    version: int = -1


@message
class Params:
    """A policy version's parameters: ModelSpec dict and state_dict as numpy."""

    version: int
    arch: str
    spec: dict[str, Any]
    state: dict[str, np.ndarray]


@message
class Subscribe:
    """To the ParamServer: tell `address` a ParamsAvailable on every new version."""

    address: str


@message
class ParamsAvailable:
    """ParamServer -> each subscriber (tell): version `version` of architecture `arch` exists.

    `anneal`: the share of games (0 to 1) in which each change of a live surgery is in use, by
    name: an added action type, or "game_version" (five_actors.surgery.anneal).
    """

    version: int
    arch: str
    anneal: dict[str, float] = field(default_factory=dict)


@message
class EvalRating:
    """EvalActor -> ParamServer (tell) after each round: the TrueSkill of parameter version `version`."""

    version: int
    trueskill: float


@message
class OpponentRequest:
    """Ask the ParamServer for a past version to play against; replied with Opponent."""


@message
class Opponent:
    """A past version sampled from the opponent pool (p_i proportional to exp(q_i)); -1 when the pool is empty."""

    version: int


@message
class MatchResult:
    """GameActor -> ParamServer (tell): a finished game of the latest policy against `opponent_version`.

    outcome is for the latest policy: 1 win, 0.5 draw, 0 loss.
    """

    opponent_version: int
    outcome: float


@message
class GetStats:
    """Ask any of the five actors for its metrics; the reply is a dict (for the live line, /metrics, logs)."""


@message
class Surgery:
    """Ask the ParamServer to operate on the live model (five_actors.surgery.ops words, `+` between operations).

    The latest version and every opponent-pool version are operated and verified, all or none;
    replied with the report (a JSON-ready dict). `dry_run`: report only, change nothing.
    A refusal is a RemoteError (SurgeryRejected) with the reason.
    """

    ops: list[str]
    dry_run: bool = False
    probe_steps: int = 128
