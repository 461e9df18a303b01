"""Learning curves of gazelle runs from their ``progress.jsonl``, drawn with matplotlib.

``gazelle plot LOGDIR [LOGDIR ...] --out FILE`` calls `plot`: one figure with the return
against env frames and against wall time (and the human-normalised score against frames
for Atari-57 / DMLab-30 runs); `build_figure` returns the same figure unsaved.
"""

from gazelle.plot.figure import build_figure, plot
from gazelle.plot.runs import PlotError, group_seeds, load_run, read_progress

__all__ = ["PlotError", "build_figure", "group_seeds", "load_run", "plot", "read_progress"]
