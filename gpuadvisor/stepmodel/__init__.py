"""One model of the analyzed steps and a what-if replay of it (docs/model.md).

`build_step_model(trace, run)` -> `StepModel`: the analyzed window, the GPU work and the host calls
that launched or waited for it, host spans (DataLoader, optimizer), every GPU idle interval with one
cause, and `predict(...)`, the replay of the steps transformed by a remedy.
"""

from gpuadvisor.stepmodel.model import Prediction, StepModel, build_step_model
from gpuadvisor.stepmodel.window import StepWindow, analyzed_window

__all__ = ["Prediction", "StepModel", "StepWindow", "analyzed_window", "build_step_model"]
