"""TensorBoard event files of a run, under RUN_DIR/tensorboard/ (`tensorboard --logdir runs/`).

The head writes, once a second, every training fact it shows on the dashboard as a scalar:
the live line's facts under `progress/NAME` (env_steps_per_s, samples_per_s, staleness, reuse,
win_rate_scripted, trueskill, ...) and every number the actors report under the name of its
Prometheus gauge (`five_actors_NAME`, averaged over the running actors of a class). The step is
the ParamServer's version and the wall time the sample's, so TensorBoard's STEP axis reads per
version and its WALL axis per second; a resumed run continues its version counter, and its
curves with it. Each surgery (and rejected or reverted one) becomes a text event `surgery`.
The writer is torch's SummaryWriter, which writes TensorBoard's own record format.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

TENSORBOARD_DIR = "tensorboard"
"""The folder under RUN_DIR that holds the event files."""
FACTS = (
    "version",
    "env_steps",
    "env_steps_per_s",
    "samples_per_s",
    "staleness",
    "reuse",
    "win_rate_scripted",
    "win_rate_low",
    "win_rate_high",
    "trueskill",
    "running",
    "restarts",
)
"""The live line's facts written under `progress/`."""


class TensorBoardLog:
    """Writes dashboard points and surgery events to RUN_DIR/tensorboard/ (a new file per run or resume)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._writer: Any = None
        self.surgeries_written = time.time()
        """The UNIX time of the newest surgery event written (older ones were written, or came before this process)."""

    @property
    def writer(self) -> Any:
        """torch's SummaryWriter, made at the first write (a run refused before it starts writes no folder)."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.run_dir / TENSORBOARD_DIR), flush_secs=5)
        return self._writer

    def point(self, point: dict[str, Any]) -> None:
        """One dashboard point: its facts and metrics at step = its version, at its wall time."""
        step = int(point.get("version") or 0)
        for name in FACTS:
            value = point.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(f"progress/{name}", value, step, walltime=point["t"])
        for name, value in point["metrics"].items():
            self.writer.add_scalar(f"five_actors_{name}", value, step, walltime=point["t"])

    def surgeries(self, events: list[dict[str, Any]]) -> None:
        """Write the surgery events newer than those written before, as text at the version they left."""
        for event in events:
            if event["ts"] <= self.surgeries_written:
                continue
            step = int(event.get("version_from") or event.get("version") or 0)
            text = "\n".join(
                f"    {line}" for line in orjson.dumps(event, option=orjson.OPT_INDENT_2).decode().splitlines()
            )
            self.writer.add_text("surgery", f"{event['event']}\n\n{text}", step, walltime=event["ts"])
            self.surgeries_written = event["ts"]

    def close(self) -> None:
        """Flush and close the event file (if one was written)."""
        if self._writer is not None:
            self._writer.close()
