"""The live dashboard on the head's HTTP port: `GET /` and the read-only JSON routes it reads.

    GET /                       the page (self-contained: no file or script from elsewhere)
    GET /api/series?since=T     the training facts sampled every second after UNIX time T
    GET /api/tree               /actors with `problem: true` on each row that makes /health 503
    GET /api/evals              the EvalActor's rounds, each with its recorded replay's name
    GET /api/surgeries          the ParamServer's surgery, surgery_rejected and surgery_reverted events, oldest first
    GET /replays/NAME           the recorded match NAME in the HTML replay player
    GET /logs?actor=GLOB        the run's structured logs, readable lines, newest `limit` (500)

Every route only reads; a real surgery goes through POST /surgery with the token, which the page
asks for and never keeps. The series are what the live line shows (TrainingLine.facts) plus every
number the learners, inference, game and eval actors report, averaged over running actors of a class.
"""

from __future__ import annotations

import importlib.resources
import re
import time
from collections import deque
from pathlib import Path
from typing import Any

from aiohttp import web

from five_actors.actors.history import eval_history
from five_actors.actors.live import TrainingLine
from five_actors.envs import EnvConfig
from five_actors.errors import GameError, LogsError
from five_actors.logreplay import LogFile, LogFilter, find_log_dir, log_files, parse_time, read_merged
from five_actors.logs import format_record
from five_actors.supervisor.health import VIEW_KEY, is_problem
from five_actors.surgery.http import make_route as surgery_route
from five_actors.tensorboard import TensorBoardLog

SERIES_POINTS = 20_000
"""Points kept in memory (one a second: five and a half hours; older points are dropped first)."""
LOG_CACHE_S = 10.0
"""Seconds the eval table read from the logs is reused before the logs are read again."""
SERIES_CLASSES = ("LearnerActor", "InferenceActor", "GameActor", "EvalActor")
"""Actor classes whose reported metrics become series, on top of the live line's facts."""
SURGERY_EVENTS = ("surgery", "surgery_rejected", "surgery_reverted")
_REPLAY_NAME = re.compile(r"^[A-Za-z0-9_.-]+\.replay$")


class Series:
    """The run's curves: one point of training facts per view the head's live line sees."""

    def __init__(self, max_points: int = SERIES_POINTS, env: EnvConfig | None = None) -> None:
        self.points: deque[dict[str, Any]] = deque(maxlen=max_points)
        self._facts = TrainingLine(env=env)

    def observe(self, view: dict[str, Any], elapsed: float) -> dict[str, Any] | None:
        """Add one point from `view` and return it (None when the tree holds no training actors)."""
        facts = self._facts.facts(view)
        if facts is None:
            return None
        metrics: dict[str, list[float]] = {}
        for actor in view["actors"]:
            if actor.get("class") not in SERIES_CLASSES or actor.get("state") != "running":
                continue
            for name, value in ((actor.get("status") or {}).get("metrics") or {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    metrics.setdefault(name, []).append(float(value))
        means = {name: round(sum(values) / len(values), 6) for name, values in metrics.items()}
        point = {"t": round(time.time(), 3), "elapsed": round(elapsed, 1), **facts, "metrics": means}
        self.points.append(point)
        return point

    def since(self, t: float) -> list[dict[str, Any]]:
        """The points taken after UNIX time `t`, oldest first."""
        return [p for p in self.points if p["t"] > t]


class EventTail:
    """The records of some events across a run's log files, read incrementally (each line parsed once)."""

    def __init__(self, run_dir: Path, events: tuple[str, ...]) -> None:
        self.run_dir = run_dir
        self.events = events
        self.records: list[dict[str, Any]] = []
        self._files: dict[Path, LogFile] = {}

    def update(self) -> list[dict[str, Any]]:
        """Read what the node files gained since the last call (new nodes' files too); all records so far, by time."""
        try:
            paths = log_files(find_log_dir(self.run_dir))
        except LogsError:
            return self.records  # no logs yet
        new = []
        for path in paths:
            source = self._files.setdefault(path, LogFile(path))
            new += [record for record, _raw in source.read_new() if record.get("event") in self.events]
        if new:
            self.records = sorted(self.records + new, key=lambda record: record["ts"])
        return self.records


class Dashboard:
    """The head's dashboard: its series, their TensorBoard event files, and its routes over the run directory."""

    def __init__(self, run_dir: Path, env: EnvConfig | None = None) -> None:
        self.run_dir = run_dir
        self.series = Series(env=env)
        self.tensorboard = TensorBoardLog(run_dir)
        self._surgeries = EventTail(run_dir, SURGERY_EVENTS)
        self._cache: dict[str, tuple[float, Any]] = {}

    def observe(self, view: dict[str, Any], elapsed: float) -> None:
        """Feed one view of the tree (the head's live line calls this every second)."""
        point = self.series.observe(view, elapsed)
        if point is not None:
            self.tensorboard.point(point)
            self.tensorboard.surgeries(self.surgeries())

    def close(self) -> None:
        """Flush the TensorBoard files (the head calls this when it stops)."""
        self.tensorboard.close()

    def install(self, app: web.Application) -> None:
        """Add the dashboard's routes, and POST /surgery that its form sends, to the head's app (before it starts)."""
        app.router.add_post("/surgery", surgery_route(lambda: app[VIEW_KEY].system))
        app.router.add_get("/", self.page)
        app.router.add_get("/api/series", self.api_series)
        app.router.add_get("/api/tree", self.api_tree)
        app.router.add_get("/api/evals", self.api_evals)
        app.router.add_get("/api/surgeries", self.api_surgeries)
        app.router.add_get("/replays/{name}", self.replay)
        app.router.add_get("/logs", self.logs)

    async def page(self, _request: web.Request) -> web.Response:
        """GET /: the dashboard page."""
        html = importlib.resources.files("five_actors").joinpath("dashboard.html").read_text(encoding="utf-8")
        return web.Response(text=html, content_type="text/html", charset="utf-8")

    async def api_series(self, request: web.Request) -> web.Response:
        """GET /api/series?since=T: {"points": [...], "now": UNIX time}."""
        try:
            since = float(request.query.get("since", "0"))
        except ValueError:
            return _bad_request(f"since={request.query['since']!r} is not a number: give UNIX seconds")
        return web.json_response({"points": self.series.since(since), "now": time.time()})

    async def api_tree(self, request: web.Request) -> web.Response:
        """GET /api/tree: the /actors view, each actor marked `problem` as /health counts it."""
        view = await request.app[VIEW_KEY].view()
        for actor in view["actors"]:
            actor["problem"] = is_problem(actor)
        return web.json_response(view)

    async def api_evals(self, _request: web.Request) -> web.Response:
        """GET /api/evals: {"rounds": [...]} as `five-actors logs eval --json`, plus `replay` per round."""
        rounds = self._cached("evals", self._read_evals)
        return web.json_response({"rounds": rounds})

    async def api_surgeries(self, _request: web.Request) -> web.Response:
        """GET /api/surgeries: {"events": [...]} (the surgery events' fields, as logged)."""
        return web.json_response({"events": self.surgeries()})

    async def replay(self, request: web.Request) -> web.StreamResponse:
        """GET /replays/NAME: the recorded match in the HTML player (written next to it once)."""
        from five_actors.game.replay import load_replay
        from five_actors.game.replay_player import write_html

        name = request.match_info["name"]
        source = self.run_dir / "replays" / name
        if not _REPLAY_NAME.match(name) or not source.is_file():
            return web.json_response(
                {"error": "not found", "message": f"no replay {name!r} in {self.run_dir / 'replays'}"}, status=404
            )
        page = source.with_name(f"{name}.html")
        if not page.is_file() or page.stat().st_mtime < source.stat().st_mtime:
            try:
                write_html(load_replay(source), page, name)
            except GameError as exc:
                return web.json_response({"error": "bad replay", "message": str(exc)}, status=422)
        return web.FileResponse(page, headers={"Content-Type": "text/html; charset=utf-8"})

    async def logs(self, request: web.Request) -> web.Response:
        """GET /logs?actor=GLOB&event=NAME&since=TIME&limit=N: readable log lines, newest last."""
        query = request.query
        try:
            limit = int(query.get("limit", "500"))
            since = parse_time(query["since"]) if "since" in query else None
        except ValueError as exc:
            return _bad_request(f"limit must be an integer, since a time: {exc}")
        log_filter = LogFilter(actors=query.getall("actor", []), events=query.getall("event", []), since=since)
        try:
            entries = read_merged(find_log_dir(self.run_dir), log_filter)
            lines = deque((format_record(record) for record, _raw in entries), maxlen=max(1, limit))
        except LogsError as exc:
            return web.json_response({"error": "not found", "message": str(exc)}, status=404)
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")

    def _cached(self, key: str, read: Any) -> Any:
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is None or now - hit[0] > LOG_CACHE_S:
            try:
                hit = (now, read())
            except LogsError:
                hit = (now, [])  # no logs yet: nothing to show
            self._cache[key] = hit
        return hit[1]

    def _read_evals(self) -> list[dict[str, Any]]:
        replays = self.run_dir / "replays"
        rows = eval_history(self.run_dir)
        for row in rows:
            found = sorted(replays.glob(f"eval-r{row['round']:05d}-*.replay"))
            row["replay"] = found[0].name if found else None
        return rows

    def surgeries(self) -> list[dict[str, Any]]:
        """The surgery history: the ParamServer's surgery events, oldest first."""
        # The ParamServer logs as an actor; the per-version lines of the verification code under it carry no actor.
        return [record for record in self._surgeries.update() if record.get("actor")]


def _bad_request(message: str) -> web.Response:
    return web.json_response({"error": "bad request", "message": message}, status=400)
