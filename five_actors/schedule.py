"""Schedules: a setting that changes with the parameter version, piecewise linearly.

In a config file a schedule is a number (constant) or a list of `[version, value]` points, e.g.
`entropy_coef = [[0, 0.01], [3000, 0.001]]`: linear between points, the first value before the
first point and the last value after the last one (OpenAI Five annealed its entropy
coefficient, learning rate and team spirit this way over training).
"""

from __future__ import annotations

Schedule = float | tuple[tuple[float, float], ...]
"""A constant, or (version, value) points with versions ascending."""


def check_schedule(name: str, schedule: Schedule, low: float, high: float) -> None:
    """Raise ValueError naming `name` unless `schedule` is well formed with every value in [low, high]."""
    if isinstance(schedule, (int, float)):
        values = [float(schedule)]
    else:
        if not schedule:
            raise ValueError(f"{name}: a schedule needs at least one [version, value] point")
        for point in schedule:
            if len(point) != 2:
                raise ValueError(f"{name}: each schedule point is [version, value], got {list(point)}")
        versions = [p[0] for p in schedule]
        if any(v < 0 for v in versions) or any(b <= a for a, b in zip(versions, versions[1:])):
            raise ValueError(f"{name}: schedule versions must be >= 0 and strictly ascending, got {versions}")
        values = [p[1] for p in schedule]
    for value in values:
        if not low <= value <= high:
            raise ValueError(f"{name} must be within [{low}, {high}], got {value}")


def schedule_value(schedule: Schedule, version: float) -> float:
    """The schedule's value at `version`."""
    if isinstance(schedule, (int, float)):
        return float(schedule)
    first_version, value = schedule[0]
    if version <= first_version:
        return float(value)
    for (v0, x0), (v1, x1) in zip(schedule, schedule[1:]):
        if version <= v1:
            return float(x0 + (x1 - x0) * (version - v0) / (v1 - v0))
    return float(schedule[-1][1])
