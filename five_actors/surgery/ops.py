"""Surgery operations: a model changes shape and keeps its behaviour (PAPER.md, "Surgery").

Each operation takes a ModelState and returns a new one; `apply` runs a list of them
atomically (the input is never modified, so a refused list changes nothing). New weights
that feed old units are zero, so every old output is computed exactly as before:

    add-observation BLOCK.FEATURE ... | all   new input columns with zero weights; the
                                              normaliser gets mean 0, var 1 for them
    add-hero NAME                             a hero-type one-hot column (zero weights)
    add-unit-type BLOCK NAME                  a unit-type one-hot column in BLOCK (zero weights)
    widen-lstm SIZE                           new LSTM units: small random inputs, zero outputs
    widen-layer NAME SIZE                     the same for entity_hidden, entity_embed, core_input
    add-action NAME [HEAD ...]                a new action type, masked until annealed in
    game-version V                            add-observation and add-action up to game version V
    game-size HEROES LANES [TOWERS_PER_LANE]  more hero and structure slots (no parameter changes)

Adam's moments are carried for old entries and start at zero for new ones (state.Edit.grow).
Removing or shrinking anything is refused: the paper kept deprecated inputs as constants.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from five_actors.errors import FiveActorsError, SurgeryRejected
from five_actors.game.config import GameConfig
from five_actors.game.layout import ActionSpec, EntityBlock, ObsSpec
from five_actors.model.policy import Policy, State
from five_actors.model.spec import ModelSpec
from five_actors.surgery.state import Edit, ModelState

NEW_WEIGHT_STD = 0.01
"""Standard deviation of the incoming weights of new units: small, but not zero (zeros would keep them identical)."""

LANE_GAME_VERSIONS = (1, 2)
"""Game versions whose layouts add-observation and game-version know."""

REMOVAL = "removal is not supported (as in OpenAI Five, deprecated inputs stay in the model as constants)"


@dataclass(frozen=True)
class SurgeryOp:
    """One operation by name with its arguments, as a user types it or a message carries it."""

    name: str
    args: tuple[str, ...] = ()

    def __str__(self) -> str:
        return " ".join((self.name, *self.args))


Operation = Callable[[Edit, Sequence[str], torch.Generator], None]

OPERATIONS: dict[str, tuple[str, Operation]] = {}
"""Operation name -> (usage of its arguments, the function that applies it to an Edit)."""


def operation(name: str, usage: str) -> Callable[[Operation], Operation]:
    """Register an operation under `name`."""

    def register(fn: Operation) -> Operation:
        OPERATIONS[name] = (usage, fn)
        return fn

    return register


def parse_ops(words: Sequence[str]) -> list[SurgeryOp]:
    """`widen-lstm 256 + add-action recall` -> two SurgeryOps (operations are separated by `+`)."""
    ops, current = [], []
    for word in [*words, "+"]:
        if word != "+":
            current.append(word)
            continue
        if not current:
            raise SurgeryRejected(f"empty operation in {' '.join(words)!r} (operations are separated by '+')")
        ops.append(SurgeryOp(current[0], tuple(current[1:])))
        current = []
    return ops


def apply(ops: Sequence[SurgeryOp], state: ModelState, seed: int = 0) -> ModelState:
    """Apply `ops` in order and return the new state; on any refusal nothing changes and the reason is raised."""
    if not ops:
        raise SurgeryRejected("no operations given")
    generator = torch.Generator().manual_seed(seed)
    edit = Edit.start(state)
    for op in ops:
        if op.name not in OPERATIONS:
            if op.name.split("-")[0] in ("remove", "drop", "shrink", "delete"):
                raise SurgeryRejected(f"{op}: {REMOVAL}")
            raise SurgeryRejected(f"unknown operation {op.name!r} (known: {', '.join(sorted(OPERATIONS))})")
        try:
            OPERATIONS[op.name][1](edit, op.args, generator)
        except (FiveActorsError, ValueError, KeyError) as exc:  # a layout the spec refuses is a refused surgery too
            raise SurgeryRejected(f"{op}: {exc}") from None
    result = edit.finish()
    _check_shapes(result)
    return result


def _check_shapes(state: ModelState) -> None:
    """The result must load strictly into a Policy of its spec: same names, same shapes."""
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in Policy(state.spec).state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state.params.items()}
    if expected != found:
        wrong = sorted(k for k in set(expected) | set(found) if expected.get(k) != found.get(k))
        raise SurgeryRejected(f"internal error: the new parameters do not fit the new spec: {wrong}")


def grow_lstm_state(state: State, size: int) -> State:
    """An LSTM state (h, c) widened to `size` units: the new units start at 0."""
    h, c = state
    pad = size - h.shape[-1]
    if pad < 0:
        raise SurgeryRejected(f"cannot shrink an LSTM state of {h.shape[-1]} units to {size}: {REMOVAL}")
    return torch.nn.functional.pad(h, (0, pad)), torch.nn.functional.pad(c, (0, pad))


# --- observations -------------------------------------------------------------------------


def target_features(spec: ModelSpec, version: int) -> dict[str, tuple[str, ...]]:
    """The lane game's features per block at `version`, with this model's hero-type one-hots."""
    from five_actors.game.spec import block_features

    if version not in LANE_GAME_VERSIONS:
        raise SurgeryRejected(f"unknown game version {version} (known: {', '.join(map(str, LANE_GAME_VERSIONS))})")
    reference = block_features(version)
    names = [b.name for b in spec.obs.blocks]
    if set(reference) != set(names):
        raise SurgeryRejected(f"the model's entity blocks {names} are not the lane game's {sorted(reference)}")
    heroes = tuple(f for f in spec.obs.block("self").features if f.startswith("type_"))
    out = {}
    for block, features in reference.items():
        plain = [f for f in features if not f.startswith("type_")]
        if len(plain) == len(features):
            out[block] = features
            continue
        at = next(i for i, f in enumerate(features) if f.startswith("type_"))
        out[block] = (*plain[:at], *heroes, *plain[at:])
    return out


def _insert_features(edit: Edit, block: str, features: Sequence[str], order: Sequence[str] | None = None) -> None:
    """Add `features` to `block`: zero encoder weights, neutral normaliser statistics.

    With `order` (a reference layout) each feature goes right after the nearest feature that
    precedes it there; without, features are appended.
    """
    old = edit.spec.obs.block(block)
    present = list(old.features)
    for feature in features:
        if feature in present:
            raise SurgeryRejected(f"block {block!r} already has feature {feature!r}")
        at = len(present)
        if order is not None:
            before = list(order[: list(order).index(feature)])
            at = next((present.index(f) + 1 for f in reversed(before) if f in present), 0)
        present.insert(at, feature)
    positions = torch.tensor([present.index(f) for f in old.features])
    width = len(present)
    hidden = edit.params[f"encoders.{block}.0.weight"].shape[0]
    edit.grow(f"encoders.{block}.0.weight", (hidden, width), (None, positions))
    edit.grow(f"norms.{block}.mean", (width,), (positions,))
    edit.grow(f"norms.{block}.var", (width,), (positions,), torch.ones(width))
    blocks = tuple(EntityBlock(b.name, b.slots, tuple(present)) if b.name == block else b for b in edit.spec.obs.blocks)
    edit.spec = replace(edit.spec, obs=ObsSpec(blocks, edit.spec.obs.version))


def add_observation(edit: Edit, features: Sequence[str], version: int = LANE_GAME_VERSIONS[-1]) -> None:
    """Add lane-game features named `BLOCK.FEATURE` (or `all` of `version`'s) where that version's layout puts them;
    in a model of an external environment, add the named features at the end of their block."""
    if not _lane_layout(edit.spec):
        _add_external_features(edit, features)
        return
    target = target_features(edit.spec, version)
    wanted: dict[str, list[str]] = {}
    if list(features) == ["all"]:
        for block, names in target.items():
            missing = [f for f in names if f not in edit.spec.obs.block(block).features]
            if missing:
                wanted[block] = missing
        if not wanted:
            raise SurgeryRejected(f"the model already has every feature of game version {version}")
    else:
        wanted = _by_block(features, target)
        for block, adding in wanted.items():
            for feature in adding:
                if feature not in target[block]:
                    raise SurgeryRejected(
                        f"game version {version} has no feature {feature!r} in block {block!r} (it has "
                        f"{', '.join(target[block])})"
                    )
    for block, adding in wanted.items():
        _insert_features(edit, block, sorted(adding, key=target[block].index), target[block])


def _lane_layout(spec: ModelSpec) -> bool:
    """Whether the model reads the lane game's entity blocks (else an external environment's)."""
    from five_actors.game.spec import block_features

    return {b.name for b in spec.obs.blocks} == set(block_features(LANE_GAME_VERSIONS[0]))


def _add_external_features(edit: Edit, features: Sequence[str]) -> None:
    """An external environment's new features (`BLOCK.FEATURE`, e.g. self.obs4) after its block's last: where a
    space that grew at its end flattens them."""
    if list(features) == ["all"]:
        raise SurgeryRejected(
            "'all' names the lane game's features; a model of an external environment needs the new ones named, "
            "BLOCK.FEATURE (a flattened space's features are self.obs0, self.obs1, ...)"
        )
    for block, adding in _by_block(features, [b.name for b in edit.spec.obs.blocks]).items():
        _insert_features(edit, block, adding)


def _by_block(features: Sequence[str], blocks: Collection[str]) -> dict[str, list[str]]:
    """Names `BLOCK.FEATURE` as block -> features, in order; SurgeryRejected for a name that is not one of `blocks`."""
    wanted: dict[str, list[str]] = {}
    for name in features:
        block, dot, feature = name.partition(".")
        if not dot or block not in blocks or not feature:
            raise SurgeryRejected(f"feature {name!r} is not BLOCK.FEATURE with BLOCK one of {sorted(blocks)}")
        wanted.setdefault(block, []).append(feature)
    return wanted


@operation("add-observation", "BLOCK.FEATURE ... | all")
def _add_observation(edit: Edit, args: Sequence[str], rng: torch.Generator) -> None:
    if not args:
        raise SurgeryRejected(
            "name the features to add (BLOCK.FEATURE ...), or 'all' for every feature of the latest game version"
        )
    add_observation(edit, args)


@operation("add-hero", "NAME")
def _add_hero(edit: Edit, args: Sequence[str], rng: torch.Generator) -> None:
    name = _single(args, "NAME")
    feature = f"type_{name}"
    blocks = [b for b in edit.spec.obs.blocks if any(f.startswith("type_") for f in b.features)]
    if not blocks:
        raise SurgeryRejected("no entity block carries hero-type one-hots (type_* features)")
    for block in blocks:
        if feature in block.features:
            raise SurgeryRejected(f"hero type {name!r} already exists (block {block.name!r} has {feature!r})")
        last = max(i for i, f in enumerate(block.features) if f.startswith("type_"))
        order = (*block.features[: last + 1], feature, *block.features[last + 1 :])
        _insert_features(edit, block.name, [feature], order)


@operation("add-unit-type", "BLOCK NAME")
def _add_unit_type(edit: Edit, args: Sequence[str], rng: torch.Generator) -> None:
    if len(args) != 2:
        raise SurgeryRejected("expected BLOCK NAME")
    block, name = args
    if block not in [b.name for b in edit.spec.obs.blocks]:
        raise SurgeryRejected(f"no entity block {block!r} (blocks: {[b.name for b in edit.spec.obs.blocks]})")
    _insert_features(edit, block, [f"unit_{name}"])


# --- widening -----------------------------------------------------------------------------


def _random_rows(shape: Sequence[int], old_rows: Tensor, rng: torch.Generator) -> Tensor:
    """Zeros of `shape` whose rows other than `old_rows` are small random values."""
    fill = torch.randn(tuple(shape), generator=rng) * NEW_WEIGHT_STD
    fill[old_rows] = 0.0
    return fill


MAX_WIDTH = 4096
"""The widest layer a surgery makes: an LSTM of 200,000 units would need hundreds of GB for every pool version."""


def _check_size(name: str, old: int, new: int) -> None:
    if new > MAX_WIDTH:
        raise SurgeryRejected(f"{name} {new} is wider than a surgery makes, at most {MAX_WIDTH}")
    if new < old:
        raise SurgeryRejected(f"{name} {new} is smaller than the current {old}: {REMOVAL}")
    if new == old:
        raise SurgeryRejected(f"{name} is already {old}: a widening needs a larger size")


def widen_lstm(edit: Edit, size: int, rng: torch.Generator) -> None:
    """New LSTM units: every gate's incoming weights small random, their outputs into old gates and heads zero."""
    if edit.spec.core != "lstm":
        raise SurgeryRejected(f"widen-lstm needs an LSTM core; this model's core is {edit.spec.core!r}")
    old = edit.spec.lstm_size
    _check_size("lstm_size", old, size)
    units = torch.arange(old)
    gates = torch.cat([g * size + units for g in range(4)])  # gate blocks i, f, g, o each grow
    core_in = edit.params["lstm.weight_ih"].shape[1]
    edit.grow("lstm.weight_ih", (4 * size, core_in), (gates, None), _random_rows((4 * size, core_in), gates, rng))
    # New units read every unit's previous h; old units' rows get zero columns for the new h.
    edit.grow("lstm.weight_hh", (4 * size, size), (gates, units), _random_rows((4 * size, size), gates, rng))
    edit.grow("lstm.bias_ih", (4 * size,), (gates,))
    edit.grow("lstm.bias_hh", (4 * size,), (gates,))
    readers = ["type_head.weight", "value_head.weight", *(["mean_head.weight"] if edit.spec.actions.continuous else [])]
    readers += [
        f"heads.{h.name}.query.weight" if h.pointer_blocks else f"heads.{h.name}.weight"
        for h in edit.spec.actions.heads
    ]
    for name in readers:
        rows = edit.params[name].shape[0]
        edit.grow(name, (rows, size), (None, units))
    edit.spec = edit.spec.with_widths(lstm_size=size)


def widen_entity_hidden(edit: Edit, size: int, rng: torch.Generator) -> None:
    """Wider hidden layer in every entity encoder."""
    old = edit.spec.entity_hidden
    _check_size("entity_hidden", old, size)
    units = torch.arange(old)
    for block in edit.spec.obs.blocks:
        first = f"encoders.{block.name}.0"
        edit.grow(f"{first}.weight", (size, block.width), (units, None), _random_rows((size, block.width), units, rng))
        edit.grow(f"{first}.bias", (size,), (units,))
        edit.grow(f"encoders.{block.name}.2.weight", (edit.spec.entity_embed, size), (None, units))
    edit.spec = edit.spec.with_widths(entity_hidden=size)


def widen_entity_embed(edit: Edit, size: int, rng: torch.Generator) -> None:
    """Wider entity embeddings: new units pooled into zero columns of the combine layer and pointer keys."""
    old, hidden = edit.spec.entity_embed, edit.spec.entity_hidden
    _check_size("entity_embed", old, size)
    units = torch.arange(old)
    blocks = edit.spec.obs.blocks
    for block in blocks:
        second = f"encoders.{block.name}.2"
        edit.grow(f"{second}.weight", (size, hidden), (units, None), _random_rows((size, hidden), units, rng))
        edit.grow(f"{second}.bias", (size,), (units,))
    pooled = torch.cat([b * size + units for b in range(len(blocks))])
    edit.grow("combine.weight", (edit.spec.core_input, len(blocks) * size), (None, pooled))
    for head in edit.spec.actions.heads:
        if head.pointer_blocks:
            edit.grow(f"heads.{head.name}.key.weight", (edit.spec.pointer_key, size), (None, units))
    edit.spec = edit.spec.with_widths(entity_embed=size)


def widen_core_input(edit: Edit, size: int, rng: torch.Generator) -> None:
    """A wider layer between the pooled embeddings and the LSTM."""
    old = edit.spec.core_input
    _check_size("core_input", old, size)
    units = torch.arange(old)
    inputs = edit.params["combine.weight"].shape[1]
    edit.grow("combine.weight", (size, inputs), (units, None), _random_rows((size, inputs), units, rng))
    edit.grow("combine.bias", (size,), (units,))
    edit.grow("lstm.weight_ih", (4 * edit.spec.lstm_size, size), (None, units))
    edit.spec = edit.spec.with_widths(core_input=size)


LAYERS: dict[str, Callable[[Edit, int, torch.Generator], None]] = {
    "entity_hidden": widen_entity_hidden,
    "entity_embed": widen_entity_embed,
    "core_input": widen_core_input,
    "lstm_size": widen_lstm,
}
"""Layers widen-layer can widen, by their ModelSpec width name."""


@operation("widen-lstm", "SIZE")
def _widen_lstm(edit: Edit, args: Sequence[str], rng: torch.Generator) -> None:
    widen_lstm(edit, _size(_single(args, "SIZE")), rng)


@operation("widen-layer", "NAME SIZE")
def _widen_layer(edit: Edit, args: Sequence[str], rng: torch.Generator) -> None:
    if len(args) != 2:
        raise SurgeryRejected("expected NAME SIZE")
    name, size = args[0], _size(args[1])
    if name == "pointer_key":
        raise SurgeryRejected(
            "pointer_key cannot be widened: the attention scale 1/sqrt(key width) would change every target logit"
        )
    if name not in LAYERS:
        raise SurgeryRejected(f"unknown layer {name!r} (widenable: {', '.join(LAYERS)})")
    LAYERS[name](edit, size, rng)


# --- actions and game versions ------------------------------------------------------------


def add_action(edit: Edit, name: str, heads: Sequence[str]) -> None:
    """A new action type at the end of the type head: zero weights, masked by the game until annealed in."""
    actions = edit.spec.actions
    if name in actions.types:
        raise SurgeryRejected(f"action type {name!r} already exists")
    known = [h.name for h in actions.heads]
    unknown = [h for h in heads if h not in known]
    if unknown:
        raise SurgeryRejected(f"unknown action head {unknown[0]!r} (heads: {', '.join(known)})")
    types = len(actions.types)
    lstm = edit.spec.lstm_size
    rows = torch.arange(types)
    edit.grow("type_head.weight", (types + 1, lstm), (rows, None))
    edit.grow("type_head.bias", (types + 1,), (rows,))
    uses = (*actions.uses, tuple(h in heads for h in known))
    edit.spec = replace(edit.spec, actions=ActionSpec((*actions.types, name), actions.heads, uses))
    edit.anneal[name] = 0.0


@operation("add-action", "NAME [HEAD ...]")
def _add_action(edit: Edit, args: Sequence[str], rng: torch.Generator) -> None:
    if not args:
        raise SurgeryRejected("expected NAME [HEAD ...] (the secondary heads the new action uses)")
    add_action(edit, args[0], args[1:])


def game_version(edit: Edit, version: int) -> None:
    """Carry the model to game `version`'s layout: its new features (add-observation) and action types (add-action)."""
    from five_actors.game.spec import action_spec

    current = edit.spec.obs.version
    if version < current:
        raise SurgeryRejected(
            f"the model is at game version {current}; going back to {version} would remove inputs: {REMOVAL}"
        )
    if version == current:
        raise SurgeryRejected(f"the model is already at game version {version}")
    target = target_features(edit.spec, version)
    missing = {b: [f for f in fs if f not in edit.spec.obs.block(b).features] for b, fs in target.items()}
    for block, features in missing.items():
        if features:
            _insert_features(edit, block, features, target[block])
    actions = action_spec(version)
    # Head sizes follow the game's config (the target head's slots): the model's own are kept.
    if [h.name for h in actions.heads] != [h.name for h in edit.spec.actions.heads]:
        raise SurgeryRejected(
            f"game version {version}'s action heads differ from the model's; only new action types can be added"
        )
    for t, name in enumerate(actions.types):
        if name not in edit.spec.actions.types:
            add_action(edit, name, [h.name for j, h in enumerate(actions.heads) if actions.uses[t][j]])
    edit.spec = replace(edit.spec, obs=ObsSpec(edit.spec.obs.blocks, version))


@operation("game-version", "V")
def _game_version(edit: Edit, args: Sequence[str], rng: torch.Generator) -> None:
    text = _single(args, "V")
    try:
        version = int(text)
    except ValueError:
        raise SurgeryRejected(f"game version must be an integer, got {text!r}") from None
    game_version(edit, version)


def game_size(edit: Edit, heroes: int, lanes: int, towers_per_lane: int) -> None:
    """Carry a lane-game model to a game of `heroes` a side on `lanes` lanes: more ally, enemy and structure slots.
    No parameter changes: every weight is shared over a block's slots (the encoders, the max-pool, the pointer
    head's keys), and the new slots read as absent in the old game (project_obs), so the model acts there as
    before. Slots are added at each block's end; the lanes' structures change meaning, which no old game shows."""
    from five_actors.game.spec import sized_config

    if not _lane_layout(edit.spec):
        raise SurgeryRejected("game-size needs a model of the lane game")
    obs = edit.spec.obs
    try:
        old = sized_config(obs, GameConfig(towers_per_lane=towers_per_lane))
        new = replace(old, heroes_per_side=heroes, lanes=lanes)
    except (FiveActorsError, ValueError) as exc:  # no lane game has the layout, or GameConfig refuses the size
        raise SurgeryRejected(str(exc)) from None
    now = f"{old.heroes_per_side} heroes a side on {old.lanes} lane(s)"
    if heroes < old.heroes_per_side or lanes < old.lanes:
        raise SurgeryRejected(f"the model plays {now}, not {heroes} on {lanes}: {REMOVAL}")
    if (heroes, lanes) == (old.heroes_per_side, old.lanes):
        raise SurgeryRejected(f"the model already plays {now}")
    slots = {
        "allies": heroes - 1,
        "enemies": heroes,
        "structures": 2 * new.structures_per_side,
    }
    blocks = tuple(replace(b, slots=slots.get(b.name, b.slots)) for b in obs.blocks)
    grown = ObsSpec(blocks, obs.version)
    heads = tuple(
        replace(h, size=sum(grown.block(b).slots for b in h.pointer_blocks)) if h.pointer_blocks else h
        for h in edit.spec.actions.heads
    )
    edit.spec = replace(edit.spec, obs=grown, actions=replace(edit.spec.actions, heads=heads))


@operation("game-size", "HEROES LANES [TOWERS_PER_LANE]")
def _game_size(edit: Edit, args: Sequence[str], rng: torch.Generator) -> None:
    if len(args) not in (2, 3):
        raise SurgeryRejected(
            "expected HEROES LANES [TOWERS_PER_LANE] (heroes a side, lanes, and the run's game.towers_per_lane: "
            f"{GameConfig.towers_per_lane} unless given)"
        )
    heroes, lanes, *towers = (_size(a) for a in args)
    game_size(edit, heroes, lanes, towers[0] if towers else GameConfig.towers_per_lane)


def _single(args: Sequence[str], usage: str) -> str:
    if len(args) != 1:
        raise SurgeryRejected(f"expected {usage}, got {len(args)} arguments")
    return args[0]


def _size(text: str) -> int:
    try:
        size = int(text)
    except ValueError:
        raise SurgeryRejected(f"size must be an integer, got {text!r}") from None
    if size < 1:
        raise SurgeryRejected(f"size must be positive, got {size}: {REMOVAL}")
    return size


def describe(old: ModelState, new: ModelState) -> dict[str, object]:
    """What a surgery changed: architecture hashes, widths, features and types added, parameter shapes and counts."""
    changed = {
        name: {"from": list(old.params[name].shape), "to": list(t.shape)}
        for name, t in new.params.items()
        if name in old.params and tuple(old.params[name].shape) != tuple(t.shape)
    }
    widths = {
        k: [getattr(old.spec, k), getattr(new.spec, k)] for k in LAYERS if getattr(old.spec, k) != getattr(new.spec, k)
    }
    features = {
        b.name: [f for f in b.features if f not in old.spec.obs.block(b.name).features]
        for b in new.spec.obs.blocks
        if b.features != old.spec.obs.block(b.name).features
    }
    slots = {
        b.name: [old.spec.obs.block(b.name).slots, b.slots]
        for b in new.spec.obs.blocks
        if b.slots != old.spec.obs.block(b.name).slots
    }
    return {
        "architecture": {"from": old.spec.hash, "to": new.spec.hash},
        "game_version": {"from": old.spec.obs.version, "to": new.spec.obs.version},
        "slots": slots,
        "widths": widths,
        "features_added": features,
        "action_types_added": [t for t in new.spec.actions.types if t not in old.spec.actions.types],
        "anneal": dict(new.anneal),
        "parameters": {"from": old.parameter_count(), "to": new.parameter_count()},
        "shapes_changed": changed,
    }
