"""The `five-actors` command line: one function per command."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import orjson

from five_actors import __version__
from five_actors.bench import BENCHMARKS
from five_actors.errors import FiveActorsError


def cmd_bench(args: argparse.Namespace) -> int:
    """Run one benchmark and print its result as one JSON object."""
    module = importlib.import_module(BENCHMARKS[args.bench])
    parser = argparse.ArgumentParser(prog=f"five-actors bench {args.bench}", description=module.__doc__)
    module.add_arguments(parser)
    result = module.run(parser.parse_args(args.bench_args))
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="five-actors", description="OpenAI Five-style distributed self-play training.")
    parser.add_argument("--version", action="version", version=f"five-actors {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    bench = commands.add_parser("bench", help="run a benchmark and print JSON")
    bench.add_argument("bench", choices=sorted(BENCHMARKS), metavar="NAME", help=", ".join(sorted(BENCHMARKS)))
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="the benchmark's own options (see NAME --help)")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `five-actors` command."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FiveActorsError as exc:
        print(f"five-actors: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
