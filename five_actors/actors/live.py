"""The live line of a training run: what `five-actors up` prints every second.

    42s | v 17 | env steps/s 1,530 | samples/s 2,048 | staleness 1.2 | reuse 1.31 | vs scripted 0.62 [0.31, 0.86] |
    TrueSkill 14.2 | 8/8 up | restarts 0

It is built from the view of the tree (the actors' `status()`, as /actors shows it): the
ParamServer's version, the GameActors' env steps (a rate over the last line), the learners'
samples/s, staleness and sample reuse, and the EvalActor's latest win rate against the
scripted bot (95% Wilson interval) and TrueSkill (random = 0). In an external
environment the last two are the GameActors' mean return over their last 100 episodes and
the EvalActor's mean return on held-out seeds (95% interval):

    42s | v 17 | env steps/s 1,530 | samples/s 2,048 | staleness 1.2 | reuse 1.31 | return 187.4 | eval 201.3 [180.2,
    222.4] | 5/5 up | restarts 0

and in a two-team external environment (self-play, no scripted bot) the GameActors' mean return and
the win rate against the EvalActor's reference, the uniformly random player, with TrueSkill:

    42s | v 17 | env steps/s 1,530 | samples/s 2,048 | staleness 1.2 | reuse 1.31 | return 5.1 | vs random 0.90
    [0.60, 0.98] | TrueSkill 8.3 | 5/5 up | restarts 0
 Every `log_every_s` the same
facts are logged as one `training_progress` event. A tree without training actors gets the
supervisor's generic line.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from five_actors.envs import EnvConfig
from five_actors.supervisor.progress import ProgressLine

log = structlog.get_logger("five_actors.actors")


def _by_class(view: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [a for a in view["actors"] if a.get("class") == name and a.get("state") == "running"]


def _metrics(actor: dict[str, Any]) -> dict[str, Any]:
    return dict((actor.get("status") or {}).get("metrics") or {})


WIN_RATE_FACTS = {
    "scripted": ("win_rate_scripted", "win_rate_low", "win_rate_high"),
    "random": ("win_rate_random", "win_rate_random_low", "win_rate_random_high"),
}
"""The facts of the win rate against each reference and its 95% interval (the scripted bot's keep their first names,
which the dashboard and TensorBoard read)."""


class TrainingLine:
    """Turns successive views into live lines (and periodic `training_progress` events)."""

    def __init__(self, log_every_s: float = 10.0, env: EnvConfig | None = None) -> None:
        self.fallback = ProgressLine()
        self.env = env
        """The run's environment, when known: it names the eval's reference from the first line (else the EvalActor's
        status names it, and until it first reports the line shows mean returns, whatever the environment)."""
        self.log_every_s = log_every_s
        self._steps: dict[str, tuple[float, float]] = {}
        self.env_steps = 0.0
        """Env steps of every game actor since the run started, across their restarts (each restart counts from 0)."""
        self._last_log = 0.0

    def facts(self, view: dict[str, Any]) -> dict[str, Any] | None:
        """The training facts in `view`; None when it holds no training actors."""
        params, games = _by_class(view, "ParamServerActor"), _by_class(view, "GameActor")
        learners, evals = _by_class(view, "LearnerActor"), _by_class(view, "EvalActor")
        if not (params or games or learners):
            return None
        now = time.monotonic()
        env_rate = 0.0
        for game in games:
            steps = float(_metrics(game).get("game_env_steps", 0.0))
            before = self._steps.get(game["path"])
            if before is not None and steps >= before[1]:
                gained = steps - before[1]
                if now > before[0]:
                    env_rate += gained / (now - before[0])
            else:
                gained = steps  # first seen, or restarted and counting from 0
            self.env_steps += gained
            self._steps[game["path"]] = (now, steps)
        returns = [float(m["game_mean_return"]) for m in map(_metrics, games) if "game_mean_return" in m]
        trained = [_metrics(a) for a in learners if "staleness_mean" in _metrics(a)]
        facts: dict[str, Any] = {
            "version": _metrics(params[0]).get("version") if params else None,
            "env_steps": int(self.env_steps),
            "env_steps_per_s": round(env_rate, 1),
            "samples_per_s": round(sum(float(m.get("samples_per_s", 0.0)) for m in map(_metrics, learners)), 1),
            "staleness": round(sum(m["staleness_mean"] for m in trained) / len(trained), 3) if trained else None,
            "reuse": round(sum(float(m.get("sample_reuse", 0.0)) for m in trained) / len(trained), 3)
            if trained
            else None,
            "win_rate_scripted": None,
            "win_rate_random": None,
            "trueskill": None,
            "mean_return": round(sum(returns) / len(returns), 3) if returns else None,
            "eval_return": None,
        }
        if self.env is not None:
            facts["reference"] = self.env.eval_reference
        if evals:
            status = evals[0].get("status") or {}
            facts.setdefault("reference", status.get("reference"))
            last = status.get("last") or {}
            if "mean_return" in last:
                facts.update(
                    eval_return=last["mean_return"], eval_return_low=last["ci_low"], eval_return_high=last["ci_high"]
                )
            results = last.get("results") or {}
            for opponent, (rate, low, high) in WIN_RATE_FACTS.items():
                if results.get(opponent):
                    result = results[opponent]
                    facts.update({rate: result["win_rate"], low: result["ci_low"], high: result["ci_high"]})
            facts["trueskill"] = last.get("trueskill")
            facts["eval_version"] = last.get("version")
        tree = [a for a in view["actors"] if not a["path"].startswith("/_")]
        facts["running"] = sum(1 for a in tree if a.get("state") == "running")
        facts["actors"] = len(tree)
        facts["restarts"] = sum(a.get("restarts") or 0 for a in tree)
        return facts

    def __call__(self, view: dict[str, Any], elapsed: float) -> str:
        facts = self.facts(view)
        if facts is None:
            return self.fallback(view, elapsed)
        if time.monotonic() - self._last_log >= self.log_every_s:
            self._last_log = time.monotonic()
            log.info("training_progress", elapsed_s=round(elapsed, 1), **facts)
        return format_line(facts, elapsed)


def format_line(facts: dict[str, Any], elapsed: float) -> str:
    """The facts as one short line; '-' where a fact is not known yet."""

    def num(value: Any, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    # The EvalActor's headline opponent: the scripted bot (lane game), the random player (a two-team external
    # environment), none (one team, or no EvalActor yet: mean returns where the games report them).
    reference = facts.get("reference")
    parts = [
        f"{elapsed:6.0f}s",
        f"v {num(facts['version'], 'd')}",
        f"env steps/s {facts['env_steps_per_s']:,.0f}",
        f"samples/s {facts['samples_per_s']:,.0f}",
        f"staleness {num(facts['staleness'], '.2f')}",
        f"reuse {num(facts['reuse'], '.2f')}",
    ]
    returns = facts.get("mean_return") is not None or facts.get("eval_return") is not None
    if returns:
        parts.append(f"return {num(facts.get('mean_return'), '.1f')}")
    if returns and reference != "random":
        evaluated = num(facts.get("eval_return"), ".1f")
        if facts.get("eval_return") is not None:
            evaluated += f" [{facts['eval_return_low']:.1f}, {facts['eval_return_high']:.1f}]"
        parts.append(f"eval {evaluated}")
    else:
        opponent = reference or "scripted"
        rate, low, high = WIN_RATE_FACTS[opponent]
        won = "-" if facts.get(rate) is None else f"{facts[rate]:.2f} [{facts[low]:.2f}, {facts[high]:.2f}]"
        parts += [f"vs {opponent} {won}", f"TrueSkill {num(facts['trueskill'], '.1f')}"]
    parts += [
        f"{facts['running']}/{facts['actors']} up",
        f"restarts {facts['restarts']}",
    ]
    return " | ".join(parts)
