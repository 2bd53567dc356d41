"""The analyzed window: the steps every metric, rule and renderer reads, as intervals.

The segmented steps come from `gpuadvisor.trace.steps` (they tile the recorded window); which of them
are analyzed is `gpuadvisor.trace.model.analyzed_mask`, defined there once (the trace kind needs it
before any step model exists): all of them but the first when there are 3 or more (it pays one-time
costs), without steps of zero or undefined length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuadvisor.trace.model import analyzed_mask

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.trace.model import TraceModel


@dataclass(frozen=True)
class StepWindow:
    """The analyzed steps: sorted, non-overlapping [start, end) intervals in trace microseconds."""

    starts: Any  # numpy float64 array
    ends: Any  # numpy float64 array
    step_ids: Any  # numpy int64 array: N of ProfilerStep#N (or the ordinal of a fallback step)

    @property
    def count(self) -> int:
        return len(self.starts)

    @property
    def durations(self) -> Any:
        return self.ends - self.starts

    @property
    def total_us(self) -> float:
        return float(self.durations.sum()) if self.count else 0.0

    @property
    def median_step_us(self) -> float:
        # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
        import numpy as np

        return float(np.median(self.durations)) if self.count else 0.0

    @property
    def lo(self) -> float:
        return float(self.starts[0]) if self.count else float("nan")

    @property
    def hi(self) -> float:
        return float(self.ends[-1]) if self.count else float("nan")

    def per_step(self, total_us: float) -> float:
        """A window total as a per-step mean."""
        return total_us / self.count if self.count else 0.0

    def share(self, total_us: float) -> float:
        """A window total as a share of the analyzed time."""
        return total_us / self.total_us if self.total_us > 0 else 0.0

    def step_index(self, ts: Any) -> Any:
        """Index (0..count-1) of the analyzed step holding each time, -1 outside (NaN -> -1)."""
        # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
        import numpy as np

        t = np.asarray(ts, dtype=np.float64)
        if self.count == 0:
            return np.full(t.shape, -1, dtype=np.int64)
        i = np.searchsorted(self.starts, t, side="right") - 1
        ic = np.clip(i, 0, self.count - 1)
        inside = (i >= 0) & (t < self.ends[ic]) & ~np.isnan(t)
        return np.where(inside, i, -1).astype(np.int64)

    def contains(self, ts: Any) -> Any:
        """Boolean mask: each time lies inside an analyzed step."""
        return self.step_index(ts) >= 0

    def mask(self, ts: pd.Series) -> pd.Series:
        """`contains` for a pandas Series, keeping its index."""
        # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
        import numpy as np
        import pandas as pd

        values = ts.to_numpy(dtype="float64", na_value=np.nan)
        out: pd.Series = pd.Series(self.contains(values), index=ts.index, dtype=bool)
        return out


def segmented_steps(trace: TraceModel) -> StepWindow:
    """Every segmented step (the outlier first step included), as a StepWindow."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    steps = trace.steps
    if len(steps) == 0:
        z = np.zeros(0, dtype=np.float64)
        return StepWindow(z, z.copy(), np.zeros(0, dtype=np.int64))
    s = steps["start"].to_numpy(dtype=np.float64)
    e = steps["end"].to_numpy(dtype=np.float64)
    return StepWindow(s, np.maximum(e, s), steps["step"].to_numpy(dtype=np.int64))


def analyzed_window(trace: TraceModel) -> StepWindow:
    """The analyzed steps of `trace` (see the module docstring)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    steps = trace.steps
    if len(steps) == 0:
        z = np.zeros(0, dtype=np.float64)
        return StepWindow(z, z.copy(), np.zeros(0, dtype=np.int64))
    chosen = steps[analyzed_mask(steps)].sort_values("start")
    s = chosen["start"].to_numpy(dtype=np.float64)
    e = chosen["end"].to_numpy(dtype=np.float64)
    return StepWindow(s, e, chosen["step"].to_numpy(dtype=np.int64))
