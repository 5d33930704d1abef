"""Learning curves of one or more runs: win rates (with 95% intervals) and TrueSkill against
minutes and env steps, as a PNG and as a self-contained HTML page with the same picture and
each run's table. `five-actors logs eval RUN_DIR --plot FILE.png` and `bench learning` draw it.

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
    path."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharey="row")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (name, rows) in enumerate(runs.items()):
        colour = colours[index % len(colours)]
        for column, x_key in enumerate(("minutes", "env_steps")):
            points = [r for r in rows if r.get(x_key) is not None]
            xs = [r[x_key] for r in points]
            for key, style, label in OPPONENTS:
                ys = [r.get(f"win_rate_{key}") for r in points]
                if all(y is None for y in ys):
                    continue
                kept = [(x, y, r.get(f"ci_{key}")) for x, y, r in zip(xs, ys, points) if y is not None]
                axes[0, column].plot(
                    [k[0] for k in kept],
                    [k[1] for k in kept],
                    style,
                    color=colour,
                    marker=".",
                    label=f"{name} vs {label}",
                )
                bands = [(x, ci) for x, _, ci in kept if ci]
                if key == "scripted" and bands:
                    axes[0, column].fill_between(
                        [x for x, _ in bands],
                        [ci[0] for _, ci in bands],
                        [ci[1] for _, ci in bands],
                        color=colour,
                        alpha=0.12,
                        linewidth=0,
                    )
            axes[1, column].plot(xs, [r["trueskill"] for r in points], "-", color=colour, marker=".", label=name)
    for column, x_label in enumerate(("minutes", "env steps")):
        axes[0, column].set_ylim(-0.02, 1.02)
        axes[1, column].set_xlabel(x_label)
        for row in (0, 1):
            axes[row, column].grid(alpha=0.3)
    axes[0, 0].set_ylabel("win rate (band: 95% interval vs scripted)")
    axes[1, 0].set_ylabel("TrueSkill (random bot = 0)")
    axes[0, 1].legend(fontsize=7, loc="best")
    axes[1, 1].legend(fontsize=7, loc="best")
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


def _page(runs: dict[str, list[dict[str, Any]]], image: bytes, title: str) -> str:
    tables = "".join(
        f"<h2>{html.escape(name)}</h2><pre>{html.escape(history_text(rows))}</pre>" for name, rows in runs.items()
    )
    data = base64.b64encode(image).decode()
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body style='font-family: sans-serif'><h1>{html.escape(title)}</h1>"
        f"<img alt='win rates and TrueSkill against minutes and env steps' src='data:image/png;base64,{data}'>"
        f"{tables}</body></html>\n"
    )
