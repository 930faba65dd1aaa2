"""The ETA of a progress bar counted in seconds: the work's own forecast (render.Progress.remaining), counted
down between forecasts so that it moves every refresh (issue 32: "ETA 0:05" stood still while 9 s passed).
Past its forecast with the work not done, it says the work runs over instead of standing at 0:00."""

from __future__ import annotations

import time

from rich.progress import ProgressColumn
from rich.text import Text


def countdown(deadline: float, now: float, finished: bool) -> str:
    """'ETA 0:07' until the deadline; then 'ETA over by 0:02' (a forecast that was short)."""
    from tfcalc.cli.render import clock

    if finished:
        return "ETA 0:00"
    left = deadline - now
    return f"ETA {clock(left)}" if left >= 0 else f"ETA over by {clock(-left)}"


class Countdown(ProgressColumn):
    """A Rich column of countdown() (redrawn at every refresh, ten a second)."""

    def render(self, task) -> Text:
        deadline = task.fields.get("deadline")
        if deadline is None:
            return Text(task.fields.get("eta", ""))
        return Text(countdown(deadline, time.monotonic(), task.finished))
