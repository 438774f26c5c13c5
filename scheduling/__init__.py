"""Tuning and design-space exploration: schedule spaces, measurement on an Executor (local pool or
Dask), an XGBoost cost model, searches, JSON-lines tuning logs, hardware sweeps.

    from vtakit.scheduling import apply_best, executor, tune_task, workload_tasks, TuningLog
    with executor() as ex:
        for task in workload_tasks("resnet18", "pynq"):
            tune_task(task, executor=ex, trials=200, log=TuningLog("tune.jsonl"))
    with apply_best("tune.jsonl"):
        module = vtakit.compile("resnet18.onnx", config="pynq")
"""

from vtakit.scheduling.executor import executor
from vtakit.scheduling.log import BestSchedules, TuningLog, apply_best, read_log
from vtakit.scheduling.measure import MeasureResult, Measurer, measure_conv
from vtakit.scheduling.model import TrainingSet, XGBCostModel
from vtakit.scheduling.schedule_space import ConvSpace
from vtakit.scheduling.task import ConvTask, task_from_layer, workload_tasks
from vtakit.scheduling.tune import TuneResult, tune_task
from vtakit.scheduling.tuners import TUNERS, make_tuner

__all__ = [
    "executor", "BestSchedules", "TuningLog", "apply_best", "read_log", "MeasureResult", "Measurer",
    "measure_conv", "TrainingSet", "XGBCostModel", "ConvSpace", "ConvTask", "task_from_layer",
    "workload_tasks", "TuneResult", "tune_task", "TUNERS", "make_tuner",
]
