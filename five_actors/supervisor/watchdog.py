"""The head's training watchdog: a tree that stops learning is as broken as one that crashed.

Every second the head reads the tree's view and keeps, per rule, when its progress counter last
moved; a counter that a view does not show (an unreachable process) has not moved. A rule stalls
after `training.stall_s` seconds without progress:

- the ParamServer's version, while any GameActor runs (the fix: restart the learners);
- a learner's `chunks_trained`, while any GameActor runs (restart that learner: its group follows);
- a GameActor's `env_steps`, while every permanent child is up (restart that game actor).

A stall makes `/health` 503 with its reason, is logged once as `training_stalled`, and, with
`training.stall_restart`, its stuck part is killed under its supervisor (RestartChild), whose
restart type and strategy decide what follows (a part at most once per `stall_s`, so that a
restart has time to start). The stall stays in /health until its counter moves again.
Roles are recognised by the actor class names the view reports.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from five_actors.errors import FiveActorsError
from five_actors.runtime.actor import ActorSystem
from five_actors.supervisor.agent import NodeAgent
from five_actors.supervisor.health import problems
from five_actors.supervisor.tree import RestartChild

log = structlog.get_logger("five_actors.watchdog")

PARAM_SERVER, LEARNER, GAME = "ParamServerActor", "LearnerActor", "GameActor"
"""The class names of the roles the rules watch."""

CHECK_EVERY_S = 1.0
"""Seconds between two looks at the tree."""


@dataclass(frozen=True)
class Stall:
    """A rule that saw no progress for `stall_s`: which (its key), why, and the actor paths to restart."""

    rule: str
    reason: str
    restart: tuple[str, ...]


@dataclass
class Watchdog:
    """Turns successive views of the tree into stalls (see the module docstring)."""

    stall_s: float
    learners: set[str] = field(default_factory=set)
    """Every path a LearnerActor was seen at: a stopped or unreachable one no longer says its class."""
    _marks: dict[str, tuple[Any, float]] = field(default_factory=dict)
    """Per rule key: the counter's last value and when it last moved."""
    _restarts: dict[str, float] = field(default_factory=dict)
    """Per actor path: when the watchdog last restarted it."""

    def check(self, view: dict[str, Any], now: float) -> list[Stall]:
        """The rules that stalled as of this view."""
        actors = {a["path"]: a for a in view["actors"]}
        self.learners |= {p for p, a in actors.items() if a.get("class") == LEARNER}
        games = [p for p, a in actors.items() if a.get("class") == GAME and a.get("state") == "running"]
        stalls = []
        for path, actor in actors.items():
            if actor.get("class") == PARAM_SERVER:
                version, rule = _number(actor, "progress", "version"), f"version:{path}"
                idle = self._idle(rule, version, now, watched=bool(games))
                if idle is not None:
                    stalls.append(
                        Stall(
                            rule,
                            f"training stalled: no new version for {idle:.0f}s (version {version}) while "
                            f"{len(games)} game actors run",
                            tuple(sorted(self.learners)),
                        )
                    )
        for path in sorted(self.learners):
            rule = f"trained:{path}"
            idle = self._idle(
                rule, _number(actors.get(path, {}), "metrics", "chunks_trained"), now, watched=bool(games)
            )
            if idle is not None:
                stalls.append(
                    Stall(rule, f"training stalled: {path} trained no chunk for {idle:.0f}s (samples/s 0)", (path,))
                )
        all_up = not problems(view)
        for path in games:
            rule = f"env:{path}"
            idle = self._idle(rule, _number(actors[path], "progress", "env_steps"), now, watched=all_up)
            if idle is not None:
                stalls.append(
                    Stall(
                        rule, f"training stalled: {path} made no env step for {idle:.0f}s with every child up", (path,)
                    )
                )
        return stalls

    def due(self, path: str, now: float) -> bool:
        """Whether to restart `path` now: not when it was restarted less than stall_s ago (it may still be starting)."""
        last = self._restarts.get(path)
        if last is not None and now - last < self.stall_s:
            return False
        self._restarts[path] = now
        return True

    def _idle(self, key: str, value: Any, now: float, watched: bool) -> float | None:
        """Seconds since `key`'s counter last moved, when that is past stall_s; a rule not watched forgets its clock."""
        if not watched:
            self._marks.pop(key, None)
            return None
        mark = self._marks.get(key)
        if mark is None or (value is not None and value != mark[0]):
            self._marks[key] = (value, now)
            return None
        idle = now - mark[1]
        return idle if idle >= self.stall_s else None


def _number(actor: dict[str, Any], part: str, name: str) -> Any:
    value = (actor.get("status") or {}).get(part, {}).get(name)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


async def watch(agent: NodeAgent, system: ActorSystem, stall_s: float, restart: bool) -> None:
    """Run the watchdog on the head until cancelled: its stalls go to `agent.stalls` (for /health) and the log."""
    watchdog = Watchdog(stall_s)
    reported: set[str] = set()
    while True:
        await asyncio.sleep(CHECK_EVERY_S)
        try:
            view = await agent.view()
        except FiveActorsError:
            continue  # the view is incomplete while a child restarts
        now = time.monotonic()
        stalls = watchdog.check(view, now)
        agent.stalls = [s.reason for s in stalls]
        for stall in stalls:
            if stall.rule not in reported:
                log.warning("training_stalled", reason=stall.reason, restart=list(stall.restart) if restart else [])
        reported = {s.rule for s in stalls}
        if restart:
            due = [p for p in sorted({p for s in stalls for p in s.restart}) if watchdog.due(p, now)]
            await _restart(system, view, due, "; ".join(s.reason for s in stalls))


async def _restart(system: ActorSystem, view: dict[str, Any], paths: list[str], reason: str) -> None:
    """Tell each stuck part's supervisor to restart it (RestartChild)."""
    nodes = {a["path"]: a.get("node") for a in view["actors"]}
    for path in paths:
        parent, child = path.rsplit("/", 1)
        node = nodes.get(parent)
        if not node:
            continue
        try:
            await system.ref(f"{node}{parent}").tell(RestartChild(child, reason))
        except FiveActorsError as exc:
            log.warning("stall_restart_failed", path=path, reason=str(exc))
