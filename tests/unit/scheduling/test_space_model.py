"""Schedule spaces, features and the XGBoost cost model, without measuring anything."""

import numpy as np
import pytest

from vtakit.compiler.backends.vta import ops
from vtakit.compiler.backends.vta.dispatch import use_schedules
from vtakit.compiler.backends.vta.heuristics import conv_terms, default_conv_knobs
from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.errors import VtaError
from vtakit.isa.config import HwConfig
from vtakit.scheduling.features import FEATURE_NAMES
from vtakit.scheduling.model import TrainingSet, XGBCostModel, throughput_labels
from vtakit.scheduling.schedule_space import ConvSpace
from vtakit.scheduling.task import ConvTask, workload_tasks
from vtakit.scheduling.tuners import TUNERS, make_tuner

PYNQ = HwConfig.preset("pynq")


@pytest.fixture(scope="module")
def c10():
    return ConvSpace(workload_tasks("resnet18", PYNQ, ["C10"])[0])


def test_space_holds_only_points_that_fit(c10):
    assert 0 < len(c10) < c10.raw_size
    for i in range(0, len(c10), 97):
        knobs = c10.knobs_of(c10.points[i])
        assert conv_terms(PYNQ, c10.task.shape, knobs) is not None
    # the default heuristic's choice is a point of the space
    assert c10.point_of(default_conv_knobs(PYNQ, c10.task.shape)) is not None


def test_space_rejects_what_does_not_fit(c10):
    too_big = ConvKnobs(tile_oc=32, tile_oh=7, tile_ow=7, tile_ic=16, vthreads=4, vthread_axis="oc")
    assert conv_terms(PYNQ, c10.task.shape, too_big) is None
    assert c10.point_of(too_big) is None
    with pytest.raises(VtaError, match="not a valid point"):
        c10.from_dict(too_big.to_dict())


def test_draw_mutate_serialise(c10):
    rng = np.random.default_rng(1)
    drawn = c10.sample(rng, 50, exclude={0, 1, 2})
    assert len(set(drawn)) == 50 and not {0, 1, 2} & set(drawn)
    for i in drawn[:20]:
        j = c10.mutate(i, rng)
        assert 0 <= j < len(c10)
        assert c10.from_dict(c10.to_dict(i)) == i
    # a tiny space runs out instead of looping
    everything = set(range(len(c10)))
    assert c10.sample(rng, 5, exclude=everything) == []


def test_features_are_finite_and_named(c10):
    f = c10.features
    assert f.shape == (len(c10), len(FEATURE_NAMES))
    assert np.isfinite(f).all()


def test_task_key_is_the_compilers_key():
    """A schedule table keyed by ConvTask.key reaches ops.conv2d (and so vtakit.compile)."""
    task = ConvTask("small", PYNQ, 1, 32, 8, 8, 32, 3, 1, 1)
    forced = ConvKnobs(tile_oc=1, tile_oh=2, tile_ow=8, tile_ic=1, vthreads=2)

    class Table:
        def lookup(self, key, cfg):
            return forced.to_dict() if key == task.key and cfg == PYNQ else None

    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, task.x_shape, dtype=np.int8)
    w = rng.integers(-128, 128, task.w_shape, dtype=np.int8)
    b = np.zeros(32, np.int32)
    _, plain = ops.conv2d(x, w, padding=1, bias=b, shift=8, clip=(0, 127), config=PYNQ)
    with use_schedules(Table()):
        _, tuned = ops.conv2d(x, w, padding=1, bias=b, shift=8, clip=(0, 127), config=PYNQ)
        _, other_epilogue = ops.conv2d(x, w, padding=1, bias=b, config=PYNQ)   # int32 out: another workload
    assert tuned.schedule == forced.to_dict() != plain.schedule
    assert other_epilogue.schedule != forced.to_dict()


def test_model_learns_to_rank_from_analytic_costs():
    """Trained on one layer's points labelled by cost, the model orders another layer's points."""
    train_space = ConvSpace(workload_tasks("resnet18", PYNQ, ["C7"])[0])
    test_space = ConvSpace(workload_tasks("resnet18", PYNQ, ["C10"])[0])
    rng = np.random.default_rng(0)
    data = TrainingSet()
    for i in rng.choice(len(train_space), 400, replace=False):
        data.add("C7", train_space.features[i], int(train_space.terms[i].cycles))
    model = XGBCostModel(seed=0)
    assert model.fit(data)
    held = rng.choice(len(test_space), 300, replace=False)
    scores = model.predict(test_space.features[held])
    speed = -np.array([test_space.terms[i].cycles for i in held])
    rank = (lambda v: np.argsort(np.argsort(v)))
    spearman = np.corrcoef(rank(scores), rank(speed))[0, 1]
    assert spearman > 0.7


def test_labels_and_empty_training():
    assert throughput_labels([200, None, 100]).tolist() == [0.5, 0.0, 1.0]
    assert not XGBCostModel().fit(TrainingSet())


@pytest.mark.parametrize("name", TUNERS)
def test_tuners_propose_unmeasured_points(c10, name):
    tuner = make_tuner(name, c10, seed=3)
    measured: set[int] = set()
    for _ in range(3):
        batch = tuner.next_batch(6, measured)
        assert batch and len(set(batch)) == len(batch) and not measured & set(batch)
        tuner.update(batch, [int(c10.terms[i].cycles) for i in batch])
        measured |= set(batch)
    if name == "grid":
        assert sorted(measured) == list(range(18))


def test_xgb_tuner_uses_transfer_before_measuring(c10):
    """With another layer's records the model is trained before the first measurement, and its first
    batch is far better (by the analytic cost) than a random one."""
    donor = ConvSpace(workload_tasks("resnet18", PYNQ, ["C7"])[0])
    data = TrainingSet()
    for i in np.random.default_rng(0).choice(len(donor), 300, replace=False):
        data.add("C7", donor.features[i], int(donor.terms[i].cycles))
    tuner = make_tuner("xgb", c10, seed=0, training=data)
    first = tuner.next_batch(8, set())
    assert tuner.model.trained
    guided = np.median([c10.terms[i].cycles for i in first])
    random = np.median([c10.terms[i].cycles for i in c10.sample(np.random.default_rng(0), 200)])
    assert guided < 0.6 * random
