"""Config files (TOML) into typed dataclasses, with `--set a.b=c` overrides.

Each section of a config file is a dataclass owned by the package that uses it; `Config`
gathers them. Every key is checked against its field's type, unknown keys are refused, and a
dataclass's `__post_init__` may raise ValueError to refuse a value: the loader turns each of
these into a ConfigError naming the full key, so nothing starts on a bad config.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import orjson

from five_actors.actors.config import TrainingConfig
from five_actors.envs import EnvConfig
from five_actors.errors import ConfigError
from five_actors.files import write_atomic
from five_actors.game.config import GameConfig
from five_actors.model.config import BaselineConfig, ModelConfig, PPOConfig
from five_actors.runtime.config import NodeConfig
from five_actors.supervisor.config import TreeConfig

T = TypeVar("T")

BUNDLED = resources.files("five_actors") / "conf"


def bundled_configs() -> list[str]:
    """Names of the configs shipped inside the package (default, smoke, ...)."""
    return sorted(p.name.removesuffix(".toml") for p in BUNDLED.iterdir() if p.name.endswith(".toml"))


def resolve_config_path(name: str | Path) -> Path:
    """A config file's path: an existing file, else a bundled config named `name` or `conf/NAME.toml`."""
    path = Path(name)
    if path.is_file():
        return path
    stem = path.name.removesuffix(".toml")
    candidate = BUNDLED / f"{stem}.toml"
    if candidate.is_file():
        return Path(str(candidate))
    raise ConfigError(
        f"config {str(name)!r} not found: not a file, and not one of the bundled configs {bundled_configs()}"
    )


def read_toml(path: Path) -> dict[str, Any]:
    """Parse one TOML file, naming the file and position on a syntax error."""
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def apply_override(tree: dict[str, Any], assignment: str) -> None:
    """Apply one `a.b.c=value` override in place; the value is parsed as TOML (strings may be bare)."""
    key, sep, raw = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, for example --set ppo.learning_rate=1e-4")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    *parents, leaf = key.split(".")
    node = tree
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {assignment!r}: {part!r} is a value, not a section")
        node = child
    node[leaf] = value


def from_mapping(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Build dataclass `cls` from `data`, checking every key and type; errors name the key."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'config'}: expected a table, got {_describe(data)}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{_join(where, unknown[0])}: unknown key (known keys: {', '.join(sorted(fields))})")
    kwargs = {name: _convert(hints[name], data[name], _join(where, name)) for name in fields if name in data}
    missing = [name for name, f in fields.items() if name not in kwargs and _required(f)]
    if missing:
        raise ConfigError(f"{_join(where, missing[0])}: required key is missing")
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ConfigError(f"{where or 'config'}: {exc}") from None


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, where)
            except ConfigError as exc:
                # A list's error says nothing about a scalar, nor a scalar's about a list: keep the error of the kind
                # given.
                if isinstance(value, list) == (get_origin(arg) in (list, tuple) or arg in (list, tuple)):
                    errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {_describe(value)} fits none of {hint}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(repr(a) for a in args)}")
        return value
    if dataclasses.is_dataclass(hint):
        return from_mapping(hint, value, where)  # type: ignore[arg-type]
    if origin in (list, tuple) or hint in (list, tuple):
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {_describe(value)}")
        item = args[0] if args else Any
        items = [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin or hint) is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a table, got {_describe(value)}")
        item = args[1] if args else Any
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {_describe(value)}")
        if not math.isfinite(value):  # JSON has no NaN or infinity: config.json would carry null to every child
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {_describe(value)}")
        return value
    if hint in (str, bool):
        if not isinstance(value, hint):
            raise ConfigError(f"{where}: expected {hint.__name__}, got {_describe(value)}")
        return value
    if hint is Path:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a path string, got {_describe(value)}")
        return Path(value)
    raise ConfigError(f"{where}: fields of type {hint!r} cannot be set from a config file")


@dataclasses.dataclass(frozen=True)
class Config:
    """A whole config file: one field per section. Sections are owned by their packages."""

    name: str = "custom"
    """The config's name, used in the run directory's name."""
    tree: TreeConfig = dataclasses.field(default_factory=TreeConfig)
    """The supervisor tree that `five-actors up` starts (five_actors.supervisor.config)."""
    node: NodeConfig = dataclasses.field(default_factory=NodeConfig)
    """This process's node: listen address, link limits, heartbeat, reconnect backoff."""
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    """The environment trained on: the lane game (default), a gymnasium id or a factory (five_actors.envs)."""
    game: GameConfig = dataclasses.field(default_factory=GameConfig)
    """The lane game (five_actors.game)."""
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    """The policy network's sizes and device."""
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
    """The PPO learner's hyperparameters."""
    baseline: BaselineConfig = dataclasses.field(default_factory=BaselineConfig)
    """The synchronous baseline's loop (`bench learn`, `bench system`); `up` does not read it."""
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    """The five actors' shared settings: rollouts, inference, buffer, publishing, pool, eval (five_actors.actors)."""


def load_config(name: str | Path, overrides: typing.Sequence[str] = ()) -> Config:
    """Read a config file (a path or a bundled name), apply `--set` overrides, validate it all."""
    path = resolve_config_path(name)
    tree = read_toml(path)
    tree.setdefault("name", path.name.removesuffix(".toml"))
    return config_from_tree(tree, overrides, str(path))


def config_from_tree(tree: dict[str, Any], overrides: typing.Sequence[str], where: str) -> Config:
    """Apply `--set` overrides to a config's raw tree and validate it; errors start with `where`."""
    for assignment in overrides:
        apply_override(tree, assignment)
    try:
        return from_mapping(Config, tree)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


RUN_CONFIG = "config.json"
"""The resolved config of a run, in its run directory: what process children and `--resume` read."""


def config_to_dict(config: Config) -> dict[str, Any]:
    """The config as plain JSON-able values (paths as strings); `from_mapping(Config, ...)` reads it back."""
    return orjson.loads(orjson.dumps(dataclasses.asdict(config), default=str))


def write_run_config(config: Config, run_dir: Path) -> Path:
    """Write RUN_DIR/config.json atomically (a reader never sees half a file); returns its path."""
    path = run_dir / RUN_CONFIG
    return write_atomic(path, orjson.dumps(config_to_dict(config), option=orjson.OPT_INDENT_2))


def read_run_config(run_dir: Path) -> Config:
    """The resolved config a run wrote to RUN_DIR/config.json."""
    path = run_dir / RUN_CONFIG
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the run's config: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON: {exc}") from None
    try:
        return from_mapping(Config, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
