"""The `five-actors` command line: one function per command."""

from __future__ import annotations

import argparse
import ctypes
import importlib
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from five_actors import __version__
from five_actors.bench import BENCHMARKS
from five_actors.errors import ConfigError, FiveActorsError, SurgeryRejected

if TYPE_CHECKING:
    from five_actors.config import Config
    from five_actors.logreplay import LogFilter


def cmd_bench(args: argparse.Namespace) -> int:
    """Run one benchmark and print its result as one JSON object."""
    module = importlib.import_module(BENCHMARKS[args.bench])
    parser = argparse.ArgumentParser(prog=f"five-actors bench {args.bench}", description=module.__doc__)
    module.add_arguments(parser)
    result = module.run(parser.parse_args(args.bench_args))
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
    return 0


def _log_filter(args: argparse.Namespace) -> LogFilter:
    from five_actors.logreplay import LogFilter

    return LogFilter(
        actors=args.actor or (),
        events=args.event or (),
        since=args.since,
        until=args.until,
        min_level=args.level,
    )


def cmd_logs_replay(args: argparse.Namespace) -> int:
    """Print a run's logs merged by time, filtered, optionally followed live."""
    from five_actors.logreplay import replay

    try:
        return replay(Path(args.run_dir), _log_filter(args), as_json=args.json, follow=args.follow)
    except BrokenPipeError:
        return 0


def cmd_logs_summary(args: argparse.Namespace) -> int:
    """Print per actor its starts, crashes, restarts and last error, and counts per event."""
    from five_actors.logreplay import find_log_dir, read_merged, summarize, summary_json, summary_text

    actors, events = summarize(read_merged(find_log_dir(Path(args.run_dir)), _log_filter(args)))
    if args.json:
        sys.stdout.write(orjson.dumps(summary_json(actors, events), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(summary_text(actors, events))
    return 0


def cmd_logs_eval(args: argparse.Namespace) -> int:
    """`five-actors logs eval RUN_DIR`: the evaluation history of a run, as a table or JSON lines."""
    from five_actors.actors.history import eval_history, history_text

    rows = eval_history(Path(args.run_dir))
    if not rows:
        raise FiveActorsError(f"{args.run_dir}: no eval_result events (the EvalActor has not finished a round)")
    sys.stdout.write(_json_lines(rows) if args.json else history_text(rows))
    if args.plot:
        from five_actors.actors.history_plot import plot_history

        page = plot_history({Path(args.run_dir).name: rows}, Path(args.plot), title=str(args.run_dir))
        print(f"plot: {args.plot} and {page}", file=sys.stderr)
    return 0


def cmd_logs_rollouts(args: argparse.Namespace) -> int:
    """`five-actors logs rollouts RUN_DIR`: what the latest policy's rows earned, per window of minutes."""
    from five_actors.actors.history import rollout_history, rollouts_text

    rows = rollout_history(Path(args.run_dir), args.window)
    if not rows:
        raise FiveActorsError(f"{args.run_dir}: no rollout_chunk events (no GameActor has shipped a chunk)")
    sys.stdout.write(_json_lines(rows) if args.json else rollouts_text(rows))
    return 0


def _json_lines(rows: list[dict[str, Any]]) -> str:
    return "".join(orjson.dumps(row).decode() + "\n" for row in rows)


def _time_arg(text: str) -> float:
    from five_actors.logreplay import parse_time

    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_logs_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    logs = commands.add_parser("logs", help="read a run's structured logs")
    which = logs.add_subparsers(dest="logs_command", required=True, metavar="{replay,summary,eval,rollouts}")
    replay = which.add_parser("replay", help="print the logs of every node merged by time")
    summary = which.add_parser("summary", help="starts, crashes, restarts and last error per actor; counts per event")
    for sub in (replay, summary):
        sub.add_argument(
            "--actor", action="append", metavar="GLOB", help="actor path glob, e.g. '/rollouts/*' (repeatable)"
        )
        sub.add_argument("--event", action="append", metavar="NAME", help="event name or glob (repeatable)")
        sub.add_argument(
            "--since", type=_time_arg, metavar="TIME", help="from this time: 10m, 2h, 30s ago, ISO time, HH:MM:SS"
        )
        sub.add_argument("--until", type=_time_arg, metavar="TIME", help="up to this time (same forms as --since)")
        sub.add_argument(
            "--level", choices=("debug", "info", "warning", "error", "critical"), help="this level and above only"
        )
        sub.add_argument("--json", action="store_true", help="JSON output (replay: the raw lines)")
    replay.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new lines, like tail -f (Ctrl-C stops)"
    )
    replay.set_defaults(func=cmd_logs_replay)
    summary.set_defaults(func=cmd_logs_summary)
    evals = which.add_parser(
        "eval", help="the EvalActor's rounds over time: win rates vs the bots, TrueSkill, env steps"
    )
    evals.add_argument("--json", action="store_true", help="one JSON object per round")
    evals.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw win rates and TrueSkill against minutes and env steps to FILE.png, and the same as FILE.html",
    )
    evals.set_defaults(func=cmd_logs_eval)
    rollouts = which.add_parser(
        "rollouts", help="what the latest policy's heroes (rows) earned while training: reward components over time"
    )
    rollouts.add_argument("--window", type=float, default=5.0, metavar="MIN", help="minutes per row (default 5)")
    rollouts.add_argument("--json", action="store_true", help="one JSON object per window")
    rollouts.set_defaults(func=cmd_logs_rollouts)
    for sub in (replay, summary, evals, rollouts):
        sub.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (its logs/ folder) or a folder of *.jsonl")


def cmd_replay(args: argparse.Namespace) -> int:
    """Play a recorded match in the terminal, or write it as a self-contained HTML player."""
    from five_actors.game.replay import load_replay
    from five_actors.game.replay_player import play_terminal, write_html

    replay = load_replay(args.file)
    if args.html:
        target = write_html(replay, args.html, source_name=Path(args.file).name)
        print(f"wrote {target} ({len(replay.frames)} frames); open it in a browser")
        return 0
    return play_terminal(replay, speed=args.speed, from_step=args.from_step, once=args.once, width=args.width)


def _add_replay_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    replay = commands.add_parser("replay", help="play back a recorded match (terminal or HTML)")
    replay.add_argument("file", metavar="FILE", help="a match replay file")
    replay.add_argument("--html", metavar="OUT", help="write a self-contained HTML player to OUT instead")
    replay.add_argument("--speed", type=float, default=1.0, help="playback speed, times real time (default 1)")
    replay.add_argument("--from", dest="from_step", type=int, metavar="STEP", help="start at this game step")
    replay.add_argument("--once", action="store_true", help="print one frame (at --from) and exit")
    replay.add_argument("--width", type=int, help="map width in characters (default: fit the terminal)")
    replay.set_defaults(func=cmd_replay)


def cmd_match(args: argparse.Namespace) -> int:
    """Play one lane-game match between two bots, print its result as JSON, and record it."""
    import dataclasses

    from five_actors.config import config_from_tree, load_config
    from five_actors.game.bots import RandomBot, ScriptedBot
    from five_actors.game.match import Bot, match_summary, play_match

    if args.config:
        config = load_config(args.config, args.set or ())
    else:
        config = config_from_tree({}, args.set or (), "--set")
    game = dataclasses.replace(config.game, seed=args.seed)
    bots: dict[str, Callable[[], Bot]] = {
        "scripted": lambda: ScriptedBot(game),
        "random": lambda: RandomBot(seed=args.seed),
    }
    if args.games < 1:
        raise ConfigError(f"--games must be at least 1, got {args.games}")
    if args.games > 1:
        if args.record:
            raise ConfigError("--record records one match: leave out --games")
        result = match_summary(game, bots[args.team0](), bots[args.team1](), args.games, seed=args.seed)
    else:
        result = play_match(game, bots[args.team0](), bots[args.team1](), seed=args.seed, record=args.record)
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


def _add_match_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    match = commands.add_parser("match", help="play one lane-game match between two bots and record it")
    match.add_argument("--team0", choices=("scripted", "random"), default="scripted", help="team 0's bot")
    match.add_argument("--team1", choices=("scripted", "random"), default="random", help="team 1's bot")
    match.add_argument("--seed", type=int, default=0, help="the match's seed (hero drafts, random bot)")
    match.add_argument("--record", metavar="PATH", help="save the match replay here (see `five-actors replay`)")
    match.add_argument(
        "--games",
        type=int,
        default=1,
        help="play this many at once and print a summary: wins, draws, ends, reward components per hero-minute by team",
    )
    match.add_argument("--config", help="a config file or bundled config name for its [game] section")
    match.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key, e.g. game.lanes=1")
    match.set_defaults(func=cmd_match)


def cmd_eval(args: argparse.Namespace) -> int:
    """Play a checkpoint against a reference; progress on stderr, the report as one JSON object on stdout."""
    from five_actors.actors.eval_checkpoint import evaluate

    report = evaluate(
        Path(args.checkpoint),
        args.vs,
        args.games,
        args.seed,
        args.device,
        Path(args.replay) if args.replay else None,
        args.config,
        args.set or (),
    )
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_eval_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    evaluate = commands.add_parser("eval", help="play a checkpoint against a reference: win rate and TrueSkill as JSON")
    evaluate.add_argument(
        "checkpoint", metavar="CKPT", help="a checkpoint file, or a run directory (its newest checkpoint)"
    )
    evaluate.add_argument(
        "--vs", required=True, metavar="REF", help="scripted, random, or another checkpoint file or run directory"
    )
    evaluate.add_argument(
        "--games", type=_positive_int, default=16, help="games to play, half on each side (default %(default)s)"
    )
    evaluate.add_argument(
        "--seed", type=int, default=0, help="seed of the games and the random bot (default %(default)s)"
    )
    evaluate.add_argument("--replay", metavar="PATH", help="record game 0 (the checkpoint on team 0) here")
    evaluate.add_argument("--device", default="cpu", help="torch device to run the policies on (default %(default)s)")
    evaluate.add_argument(
        "--config", help="a config whose [game] to play (default: the checkpoint's run's config.json, else default)"
    )
    evaluate.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a config key, e.g. game.time_limit_steps=600"
    )
    evaluate.set_defaults(func=cmd_eval)


def cmd_up(args: argparse.Namespace) -> int:
    """Start the root supervisor and its tree on this host, serve HTTP, stop cleanly on Ctrl-C/SIGTERM."""
    from five_actors.actors.live import TrainingLine
    from five_actors.config import load_config
    from five_actors.dashboard import Dashboard
    from five_actors.runtime.node import run
    from five_actors.supervisor.main import default_run_dir, up
    from five_actors.supervisor.sizing import count_names

    sizes = {"learners": args.learners, "game_actors": args.game_actors}
    overrides = [*(args.set or ()), *(f"tree.counts.{name}={n}" for name, n in sizes.items() if n is not None)]
    if args.games_per_actor is not None:
        overrides.append(f"training.games_per_actor={args.games_per_actor}")
    if args.resume:
        if args.config is not None or args.run_dir:
            raise FiveActorsError(
                "--resume RUN_DIR continues that run with its own config: drop --config and --run-dir"
            )
        run_dir = Path(args.resume)
        config = resume_config(run_dir, overrides)
        check_resumable(run_dir, args.allow_fresh)
    else:
        config = load_config(args.config or "default", overrides)
        run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(config.name)
    line = TrainingLine(env=config.env)
    counted = count_names(config.tree.children)
    for name, n in sizes.items():
        if n is not None and name not in counted:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(
                f"{flag}: no child of this tree has count = {name!r} (a resumed run keeps the tree it started with)"
            )
    dashboard = Dashboard(run_dir, config.env)
    return run(up(config, run_dir, args.host, args.port, args.duration, sys.stdout, line, dashboard))


def resume_config(run_dir: Path, overrides: Sequence[str]) -> Config:
    """The config a run wrote to RUN_DIR/config.json, with `--set` overrides, for `up --resume`.

    The learners' rendezvous port is picked afresh (the old one may be taken), unless set.
    """
    from five_actors.config import RUN_CONFIG, config_from_tree, config_to_dict, read_run_config

    if not (run_dir / RUN_CONFIG).is_file():
        raise FiveActorsError(f"--resume {run_dir}: no {RUN_CONFIG} there; is it the run directory `up` printed?")
    tree = config_to_dict(read_run_config(run_dir))
    tree["training"]["rendezvous_port"] = 0
    return config_from_tree(tree, overrides, f"--resume {run_dir}")


def check_resumable(run_dir: Path, allow_fresh: bool) -> None:
    """Refuse `up --resume` (FiveActorsError, exit 2) when no checkpoint is readable, unless `allow_fresh`, or when
    pool.json or eval/ratings.json is damaged; each refusal names the files and how to go on."""
    from five_actors.actors.eval import RATINGS_FILE
    from five_actors.actors.ratings import load_state
    from five_actors.actors.store import POOL_FILE, CheckpointStore
    from five_actors.errors import CheckpointError
    from five_actors.model.checkpoint import read_checkpoint

    store = CheckpointStore(run_dir / "checkpoints")
    unreadable = []
    for version in reversed(store.versions()):
        try:
            read_checkpoint(store.path(version))
            break
        except CheckpointError as exc:
            unreadable.append(str(exc))
    else:
        if not allow_fresh:
            found = "; ".join(unreadable[:3]) + (f"; and {len(unreadable) - 3} more" if len(unreadable) > 3 else "")
            raise FiveActorsError(
                f"--resume {run_dir}: no readable checkpoint in {store.directory}"
                f"{f' ({found})' if found else ''}; --allow-fresh starts over from version 0 in that run dir"
            )
    try:
        store.load_pool()
    except CheckpointError as exc:
        raise FiveActorsError(
            f"--resume {run_dir}: {exc}; move {store.directory / POOL_FILE} aside to resume with an empty "
            "opponent pool (the checkpoints keep the parameters)"
        ) from None
    try:
        load_state(run_dir / RATINGS_FILE)
    except FiveActorsError as exc:
        raise FiveActorsError(
            f"--resume {run_dir}: {exc}; move {run_dir / RATINGS_FILE} aside to resume with fresh ratings"
        ) from None


def cmd_health(args: argparse.Namespace) -> int:
    """Print the cluster's actor tree (GET /actors) as a table, or as JSON; exit 1 when degraded."""
    import urllib.error
    import urllib.request

    from five_actors.supervisor.progress import table

    base = args.url.rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/actors", timeout=10) as response:
            view = orjson.loads(response.read())
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=10) as response:
                status = orjson.loads(response.read())
        except urllib.error.HTTPError as exc:
            status = orjson.loads(exc.read())
    except (urllib.error.URLError, OSError) as exc:
        raise FiveActorsError(f"cannot reach {base}: {getattr(exc, 'reason', exc)}") from None
    if args.json:
        sys.stdout.write(orjson.dumps({"health": status, **view}, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(table(view) + "\n")
        sys.stdout.write(f"health: {status['status']}" + "".join(f"\n  {p}" for p in status["problems"]) + "\n")
    return 0 if status["status"] == "ok" else 1


def cmd_join(args: argparse.Namespace) -> int:
    """Join a head as a host supervisor and run the children it assigns."""
    from five_actors.runtime.node import run
    from five_actors.supervisor.main import default_run_dir, join, read_token

    if bool(args.token) == bool(args.token_file):
        raise FiveActorsError("join needs the cluster token: give exactly one of --token-file F or --token T")
    token = args.token or read_token(Path(args.token_file))
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(f"join-{args.name or 'host'}")
    return run(join(args.url, token, args.name, args.host, args.port, run_dir, sys.stdout, args.advertise_host))


def cmd_node(args: argparse.Namespace) -> int:
    """Internal: the entry of an OS-process child (started by its supervisor, not by hand)."""
    from five_actors.runtime.node import run
    from five_actors.supervisor.main import child_node

    return run(
        child_node(
            args.node_id,
            args.path,
            args.spec,
            args.parent,
            args.run_dir,
            args.log_level,
            args.host,
            args.advertise_host,
        )
    )


def _add_supervisor_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = commands.add_parser(
        "up",
        help="start the root supervisor and its tree on this host",
        description="Start the root supervisor and its tree on this host. The live dashboard is at "
        "http://HOST:PORT/ (default http://127.0.0.1:8780/; the URL is printed at start).",
    )
    up.add_argument("--config", help="a config file or bundled config name (default: default)")
    up.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue that run: its config, checkpoint, version counters, pool and ratings",
    )
    up.add_argument(
        "--allow-fresh", action="store_true", help="with --resume: start from version 0 when no checkpoint is readable"
    )
    up.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a config key, e.g. --set tree.max_restarts=5"
    )
    up.add_argument("--run-dir", help="where logs and the token go (default: runs/<UTC time>-<config name>/)")
    up.add_argument("--duration", type=float, help="stop cleanly after this many seconds")
    up.add_argument(
        "--learners",
        type=_positive_int,
        metavar="N",
        help="learner processes in the allreduce group (--set tree.counts.learners=N)",
    )
    up.add_argument(
        "--game-actors", type=_positive_int, metavar="M", help="GameActor processes (--set tree.counts.game_actors=M)"
    )
    up.add_argument(
        "--games-per-actor",
        type=_positive_int,
        metavar="K",
        help="games each GameActor steps (--set training.games_per_actor=K)",
    )
    up.add_argument("--host", help="interface to serve HTTP and links on (default: node.host, 127.0.0.1)")
    up.add_argument("--port", type=int, help="port to serve on (default: node.port, 8780; 0 picks a free one)")
    up.set_defaults(func=cmd_up)

    health = commands.add_parser("health", help="print the cluster's actor tree with states, restarts and rates")
    health.add_argument("--url", default="http://127.0.0.1:8780", help="the head's HTTP address (default: %(default)s)")
    health.add_argument("--json", action="store_true", help="print JSON instead of a table")
    health.set_defaults(func=cmd_health)

    join = commands.add_parser("join", help="join a head as a host supervisor (needs the cluster token)")
    join.add_argument("url", metavar="ws://HEAD:PORT", help="the head node's address")
    join.add_argument("--token-file", help="a file holding the cluster token (the head's RUN_DIR/token)")
    join.add_argument("--token", help="the cluster token itself")
    join.add_argument(
        "--name", help="this host's name and node id (default: the hostname); a host child of the same id prefers it"
    )
    join.add_argument("--host", default="127.0.0.1", help="interface to serve on (default: %(default)s)")
    join.add_argument("--port", type=int, default=0, help="port to serve on (default: any free port)")
    join.add_argument(
        "--advertise-host",
        default="",
        help="address the head and peers reach this host at (default: --host, or the hostname for 0.0.0.0)",
    )
    join.add_argument("--run-dir", help="where this host's logs go (default: runs/<UTC time>-join-<name>/)")
    join.set_defaults(func=cmd_join)

    node = commands.add_parser("node")  # internal and hidden: no help= keeps it out of the command list
    node.add_argument("--node-id", required=True)
    node.add_argument("--path", required=True)
    node.add_argument("--spec", required=True)
    node.add_argument("--parent", required=True)
    node.add_argument("--run-dir", default="")
    node.add_argument("--log-level", default="info")
    node.add_argument("--host", default="127.0.0.1")
    node.add_argument("--advertise-host", default="")
    node.set_defaults(func=cmd_node)


def cmd_surgery(args: argparse.Namespace) -> int:
    """Apply surgery operations to a checkpoint (or a live cluster's model), verify that behaviour is kept, write the
    result."""
    if args.url:
        return _live_surgery(args)
    from five_actors.config import load_config
    from five_actors.logs import configure_logging
    from five_actors.surgery.offline import checkpoint_surgery, format_report
    from five_actors.surgery.ops import parse_ops

    if args.out is None and not args.dry_run:
        raise SurgeryRejected("give --out FILE for the new checkpoint, or --dry-run to only report")
    if args.overrides and not args.config:
        raise FiveActorsError("--set overrides a config: give --config as well")
    config = load_config(args.config, args.overrides or ()) if args.config else None
    configure_logging("surgery", None, level="warning")  # stdout carries the report only
    report = checkpoint_surgery(
        parse_ops(args.operation),
        args.checkpoint,
        None if args.dry_run else args.out,
        None if config is None else config.game,
        args.probe_steps,
        seed=args.seed,
        env=None if config is None else config.env,
    )
    sys.stdout.write(
        orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n" if args.json else format_report(report)
    )
    return 0


def _live_surgery(args: argparse.Namespace) -> int:
    """`surgery OP ... --url`: POST /surgery to a running head and print its report."""
    import urllib.error
    import urllib.request

    from five_actors.supervisor.main import read_token
    from five_actors.surgery.offline import format_report

    if args.token_file is None:
        raise FiveActorsError("a live surgery needs the cluster token: give --token-file RUN_DIR/token")
    token = read_token(Path(args.token_file))
    body = orjson.dumps({"ops": args.operation, "dry_run": args.dry_run, "probe_steps": args.probe_steps})
    request = urllib.request.Request(
        f"{args.url.rstrip('/')}/surgery",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    done = threading.Event()
    progress = threading.Thread(target=_surgery_progress, args=(args.url.rstrip("/"), done), daemon=True)
    progress.start()
    try:
        with urllib.request.urlopen(request, timeout=660) as response:
            report = orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        answer = orjson.loads(exc.read() or b"{}")
        raise SurgeryRejected(
            f"{args.url} refused the surgery ({exc.code}): {answer.get('message', exc.reason)}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise FiveActorsError(f"cannot reach {args.url}: {getattr(exc, 'reason', exc)}") from None
    finally:
        done.set()
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    latest = report["verification"][str(report["version_from"])]
    outcome = None
    if not report["dry_run"]:
        outcome = (
            f"live: version {report['version_from']} -> {report['version_to']}, "
            f"{len(report['versions_operated'])} version(s) operated; new architecture in play after "
            f"{report['in_play_seconds']:.1f}s (training paused {report['pause_seconds']:.1f}s), "
            f"the pool done after {report['seconds']:.1f}s"
            + (f", {len(report['pool_dropped'])} pool version(s) refused and dropped" if report["pool_dropped"] else "")
        )
    sys.stdout.write(format_report({**report, "verification": latest, "out": None}, outcome))
    return 0


def _surgery_progress(url: str, done: threading.Event) -> None:
    """While a live surgery runs, the opponent pool's progress on stderr (the head's /actors, every 2 s)."""
    import urllib.error
    import urllib.request

    sys.stderr.write("surgery: probes, then the latest version (training pauses), then the opponent pool\n")
    last = ""
    while not done.wait(2.0):
        try:
            with urllib.request.urlopen(f"{url}/actors", timeout=5) as response:
                view = orjson.loads(response.read())
        except (urllib.error.URLError, OSError, orjson.JSONDecodeError):
            continue
        for actor in view.get("actors", []):
            metrics = (actor.get("status") or {}).get("metrics") or {}
            waiting, operated = metrics.get("surgery_pool_waiting", 0), metrics.get("surgery_pool_operated", 0)
            if actor.get("class") == "ParamServerActor" and waiting:
                line = f"surgery: new architecture in play; pool versions operated {operated} of {operated + waiting}"
                if line != last:
                    sys.stderr.write(line + "\n")
                    last = line


def _add_surgery_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    surgery = commands.add_parser(
        "surgery",
        help="change a model's shape without changing what it does",
        description=(
            "Operations (join several with '+'): add-observation BLOCK.FEATURE ...|all; add-hero NAME; "
            "add-unit-type BLOCK NAME; widen-lstm SIZE; widen-layer NAME SIZE; add-action NAME [HEAD ...]; "
            "game-version V; game-size HEROES LANES [TOWERS_PER_LANE]."
        ),
    )
    surgery.add_argument(
        "operation", nargs="+", metavar="OP", help="an operation and its arguments, e.g. widen-lstm 256"
    )
    target = surgery.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--checkpoint", type=Path, metavar="FILE", help="the checkpoint to operate on (model and optimizer state)"
    )
    target.add_argument(
        "--url", metavar="http://HEAD:PORT", help="operate on a running cluster's model (POST /surgery to its head)"
    )
    surgery.add_argument(
        "--token-file", metavar="FILE", help="with --url: the cluster token (the head's RUN_DIR/token)"
    )
    surgery.add_argument("--out", type=Path, metavar="FILE", help="where to write the new checkpoint (atomically)")
    surgery.add_argument(
        "--dry-run", action="store_true", help="report what would change and the verification, write nothing"
    )
    surgery.add_argument(
        "--config",
        metavar="CONFIG",
        help="the run's config: its [game] section shapes the probe games, or its [env] names the external "
        "environment they are played in",
    )
    surgery.add_argument(
        "--set", dest="overrides", action="append", metavar="KEY=VALUE", help="override a key of --config"
    )
    surgery.add_argument(
        "--probe-steps", type=int, default=256, metavar="N", help="steps of recorded games to verify on (default 256)"
    )
    surgery.add_argument("--seed", type=int, default=0, help="seed of the probe games and of new units' weights")
    surgery.add_argument("--json", action="store_true", help="print the report as JSON")
    surgery.set_defaults(func=cmd_surgery)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="five-actors", description="OpenAI Five-style distributed self-play training."
    )
    parser.add_argument("--version", action="version", version=f"five-actors {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    bench = commands.add_parser("bench", help="run a benchmark and print JSON")
    bench.add_argument("bench", choices=sorted(BENCHMARKS), metavar="NAME", help=", ".join(sorted(BENCHMARKS)))
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="the benchmark's own options (see NAME --help)")
    bench.set_defaults(func=cmd_bench)
    _add_logs_parser(commands)
    _add_replay_parser(commands)
    _add_match_parser(commands)
    _add_eval_parser(commands)
    _add_supervisor_parsers(commands)
    _add_surgery_parser(commands)
    return parser


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for reuse instead of handing it back to the kernel; false where this is
    not glibc. Its defaults give a block of over 128 KiB, or one that leaves the heap's top more than 128 KiB free,
    back at once, so every tensor of the policy's batches (a 1,024-row chunk batch's entity embeddings are 3.7 MB)
    came from fresh pages: 90,000-180,000 page faults in `bench policy`'s 8 seconds, 1,000-2,000 with this. The cost
    is memory: a process keeps its peak."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 1 << 30))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `five-actors` command."""
    keep_freed_memory()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FiveActorsError as exc:
        print(f"five-actors: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
