"""The live progress line of `five-actors up`, and the table of `five-actors health`."""

from __future__ import annotations

import time
from typing import Any


class ProgressLine:
    """Builds the progress line from successive views; actors' `progress` counters become rates."""

    def __init__(self) -> None:
        self._previous: dict[str, tuple[float, float]] = {}

    def __call__(self, view: dict[str, Any], elapsed: float) -> str:
        """One line: uptime, children running, restarts, messages/s, and each progress counter per second."""
        actors = [a for a in view["actors"] if not a["path"].startswith("/_")]  # the tree, not the node's helpers
        running = sum(1 for a in actors if a.get("state") == "running")
        restarts = sum(a.get("restarts") or 0 for a in actors)
        rate = sum((a.get("in_per_s") or 0.0) for a in actors)
        now = time.monotonic()
        counters: dict[str, float] = {}
        for a in actors:
            for name, value in (a.get("status") or {}).get("progress", {}).items():
                if isinstance(value, (int, float)) and not isinstance(
                    value, bool
                ):  # counters; labels such as `arch` are not
                    counters[name] = counters.get(name, 0.0) + float(value)
        rates = []
        for name, value in sorted(counters.items()):
            before = self._previous.get(name)
            if before is not None and now > before[0] and value >= before[1]:
                rates.append(f"{name}/s {(value - before[1]) / (now - before[0]):,.0f}")
            self._previous[name] = (now, value)
        parts = [
            f"{elapsed:6.0f}s",
            f"{running}/{len(actors)} running",
            f"restarts {restarts}",
            f"msgs/s {rate:,.0f}",
            *rates,
        ]
        return " | ".join(parts)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def table(view: dict[str, Any]) -> str:
    """The tree as a readable table: one row per actor, then the nodes with their links and GPUs."""
    columns = ["path", "node", "pid", "kind", "state", "restarts", "mailbox", "in_per_s", "out_per_s", "last_error"]
    rows = [[_cell(a.get(c)) for c in columns] for a in view["actors"]]
    for row in rows:
        row[-1] = row[-1].splitlines()[0][:80] if row[-1] != "-" else row[-1]
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append("")
    # One reason shared by every node (typically no GPU on a CPU host) is said once, after the nodes.
    reasons = {node["gpus_reason"] for node in view["nodes"] if not node["gpus"]}
    shared = next(iter(reasons)) if len(reasons) == 1 and not any(node["gpus"] for node in view["nodes"]) else None
    for node in view["nodes"]:
        links = ", ".join(f"{lk['peer']} {lk['state']}" for lk in node["links"]) or "none"
        gpus = ", ".join(
            f"gpu{g['index']} {g['utilization_pct']}% {g['memory_used_bytes'] / 2**30:.1f} GiB" for g in node["gpus"]
        )
        where = f"node {node['node']} (pid {node['pid']}, {node['host']}): links: {links}"
        lines.append(where if shared is not None else f"{where}; gpus: {gpus or node['gpus_reason']}")
    if shared is not None:
        lines.append(f"gpus: {shared}")
    return "\n".join(lines)
