"""The one exception tree of five_actors.

    FiveActorsError                 anything this package raises on purpose
    ├── ConfigError                 a bad config file, key or value (names the key)
    ├── WireError                   a frame that cannot be decoded or encoded
    │   └── UnknownMessageType      a well-formed frame naming no registered message
    ├── LinkError                   a link between nodes is refused or lost
    │   └── TokenRefused            the cluster token is missing or wrong
    ├── ActorError                  something about an actor as seen from outside it
    │   ├── ActorDown               the actor is not running (or died while asked)
    │   ├── AskTimeout              no reply within the ask's timeout
    │   └── RemoteError             the handler refused the request (carries its type and text)
    ├── SupervisorError             a supervisor gave up (restart intensity exceeded)
    ├── GameError                   bad actions, impossible game settings
    ├── ModelError                  observations, masks or losses the model refuses
    │   └── ArchMismatch            a request for another architecture than the model held
    ├── CheckpointError             a truncated, corrupt or mismatched checkpoint
    ├── TrainingError               parameters or rollout chunks the training actors refuse
    │   ├── VersionUnavailable      a parameter version that cannot be served or played
    │   └── StateUnavailable        a game actor's held LSTM state that the inference actor does not have
    ├── LogsError                   a run's logs that cannot be found or read
    └── SurgeryRejected             a surgery that would change behaviour or is not supported

A handler that raises a FiveActorsError refuses one request: the asker receives it as a
RemoteError and the actor keeps running. Any other exception crashes the actor. A refusal the
asker acts on is matched by its type (`RemoteError.is_a(ArchMismatch)`), never by its text.
"""

from __future__ import annotations


class FiveActorsError(Exception):
    """Base of every error five_actors raises on purpose."""


class ConfigError(FiveActorsError):
    """A config file, key or value is wrong; the message names the key."""


class WireError(FiveActorsError):
    """A frame cannot be decoded (or a value cannot be encoded)."""


class UnknownMessageType(WireError):
    """A frame names a message type that is not registered."""


class LinkError(FiveActorsError):
    """A link between two nodes was refused or lost."""


class TokenRefused(LinkError):
    """The cluster token was missing or wrong."""


class ActorError(FiveActorsError):
    """An actor-level failure seen by someone talking to that actor."""


class ActorDown(ActorError):
    """The actor is not running, or stopped before it replied."""


class AskTimeout(ActorError):
    """An ask got no reply within its timeout."""


class RemoteError(ActorError):
    """A handler refused a request with a FiveActorsError; carries the original type name."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message

    def is_a(self, error: type[FiveActorsError]) -> bool:
        """Whether the handler refused with `error` (by its type's name, which is what crosses the wire)."""
        return self.error_type == error.__name__


class SupervisorError(FiveActorsError):
    """A supervisor exceeded its restart intensity and gave up."""


class GameError(FiveActorsError):
    """Bad actions or impossible game settings."""


class ModelError(FiveActorsError):
    """Observations, masks or losses that the model refuses."""


class ArchMismatch(ModelError):
    """A request (or parameters) for another architecture than the model held, e.g. across a live surgery."""


class CheckpointError(FiveActorsError):
    """A checkpoint that is truncated, corrupt or does not match."""


class TrainingError(FiveActorsError):
    """Parameters, optimizer state or rollout chunks of the wrong architecture, shape or version."""


class VersionUnavailable(TrainingError):
    """A parameter version that is unknown, no longer kept, or of another architecture than the one playing."""


class StateUnavailable(TrainingError):
    """An InferRequest that takes its rows' held LSTM state where the inference actor holds none for that step (it
    restarted, or another inference actor served the step before)."""


class LogsError(FiveActorsError):
    """A run directory or its log files that do not exist or cannot be read."""


class SurgeryRejected(FiveActorsError):
    """A surgery that is unsupported or would change the model's behaviour."""
