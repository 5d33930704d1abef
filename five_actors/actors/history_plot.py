"""Learning curves of one or more runs: win rates (with 95% intervals) and TrueSkill, or an
environment of one team's mean return (with its 95% interval), against minutes and env steps,
as a PNG and as a self-contained HTML page with the same picture and each run's table.
`five-actors logs eval RUN_DIR --plot FILE.png` and `bench learning` draw it.

matplotlib draws the PNG (a figure with axes, bands and a legend is what it does well; no
hand-written rasteriser would read as clearly); the HTML embeds that PNG, so it needs no server.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from five_actors.actors.history import history_text

OPPONENTS = (("scripted", "-", "scripted bot"), ("random", "--", "random bot"), ("past", ":", "past versions"))
"""(row key suffix, line style, label) of each win-rate curve."""


def plot_history(runs: dict[str, list[dict[str, Any]]], png: Path, title: str = "") -> Path:
    """Draw `runs` (name -> eval history rows) to `png` and the same as an HTML page beside it; returns the page's
    path. Runs of a one-team environment (rounds with a mean return, no opponents) get one row of plots: the mean
    return of the held-out episodes with its 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    returns = any(r.get("mean_return") is not None for rows in runs.values() for r in rows)
    fig, axes = plt.subplots(1 if returns else 2, 2, figsize=(12, 4 if returns else 8), sharey="row", squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (name, rows) in enumerate(runs.items()):
        colour = colours[index % len(colours)]
        for column, x_key in enumerate(("minutes", "env_steps")):
            points = [r for r in rows if r.get(x_key) is not None]
            if returns:
                _curve(axes[0, column], points, x_key, "mean_return", "ci_return", "-", colour, name)
                continue
            for key, style, label in OPPONENTS:
                band = "ci_scripted" if key == "scripted" else None
                _curve(axes[0, column], points, x_key, f"win_rate_{key}", band, style, colour, f"{name} vs {label}")
            axes[1, column].plot(
                [r[x_key] for r in points], [r["trueskill"] for r in points], "-", color=colour, marker=".", label=name
            )
    for column, x_label in enumerate(("minutes", "env steps")):
        if not returns:
            axes[0, column].set_ylim(-0.02, 1.02)
        axes[-1, column].set_xlabel(x_label)
        for row in axes:
            row[column].grid(alpha=0.3)
    if returns:
        axes[0, 0].set_ylabel("mean return of held-out episodes (band: 95% interval)")
    else:
        axes[0, 0].set_ylabel("win rate (band: 95% interval vs scripted)")
        axes[1, 0].set_ylabel("TrueSkill (random bot = 0)")
    for row in axes:
        row[1].legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    png.write_bytes(buffer.getvalue())
    page = png.with_suffix(".html")
    page.write_text(_page(runs, buffer.getvalue(), title or png.stem))
    return page


def _curve(
    axis: Any,
    points: list[dict[str, Any]],
    x_key: str,
    key: str,
    band_key: str | None,
    style: str,
    colour: str,
    label: str,
) -> None:
    """One run's curve of `key` against `x_key` where it is known, with the 95% band of `band_key` under it."""
    kept = [r for r in points if r.get(key) is not None]
    if not kept:
        return
    axis.plot([r[x_key] for r in kept], [r[key] for r in kept], style, color=colour, marker=".", label=label)
    if band_key is None:
        return
    bands = [r for r in kept if r.get(band_key)]
    if bands:
        xs = [r[x_key] for r in bands]
        axis.fill_between(
            xs, [r[band_key][0] for r in bands], [r[band_key][1] for r in bands], color=colour, alpha=0.12, linewidth=0
        )


def _page(runs: dict[str, list[dict[str, Any]]], image: bytes, title: str) -> str:
    tables = "".join(
        f"<h2>{html.escape(name)}</h2><pre>{html.escape(history_text(rows))}</pre>" for name, rows in runs.items()
    )
    data = base64.b64encode(image).decode()
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body style='font-family: sans-serif'><h1>{html.escape(title)}</h1>"
        f"<img alt='learning curves against minutes and env steps' src='data:image/png;base64,{data}'>"
        f"{tables}</body></html>\n"
    )
