"""The run's options: one frozen :class:`EvalConfig` that refuses what cannot work in one line and holds the defaults
that ``evaluate()``, ``submit()``, the command line and the request worker share."""

import dataclasses
import inspect

import pytest

from harness.cli import submit as cli_submit
from harness.config import SUBMIT_DEFAULTS, EvalConfig, Limits
from harness.errors import HarnessError


@pytest.mark.parametrize(
    "options,message",
    [
        ({"num_levels": 1}, "--levels must be at least 2 (the method needs a first and a last level), got 1"),
        ({"batch_size": 0}, "--batch-size must be at least 1, got 0"),
        ({"workers": -1}, "--workers must be 0 or more, got -1"),
        ({"decoder": "opencv"}, "--decoder must be one of auto, pil, torchvision, got 'opencv'"),
        ({"feature_dtype": "bfloat16"}, "--feature-dtype must be one of float32, float16, got 'bfloat16'"),
        ({"name": ".."}, "the model name '..' is not a name"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else None,
)
def test_a_config_that_cannot_work_is_refused_in_one_line(options, message):
    for make in (lambda: EvalConfig(**options), lambda: dataclasses.replace(EvalConfig(), **options)):
        with pytest.raises(HarnessError) as refused:
            make()
        assert str(refused.value) == message


def test_a_config_is_frozen_and_keeps_its_kappas_as_a_tuple():
    config = EvalConfig(kappas=["softmax", "knn:k=5"], workers=0)
    assert (config.kappas, config.workers) == (("softmax", "knn:k=5"), 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 1


def test_submit_differs_from_evaluate_only_by_its_score_cache():
    plain = EvalConfig()
    assert [
        f.name for f in dataclasses.fields(EvalConfig) if getattr(SUBMIT_DEFAULTS, f.name) != getattr(plain, f.name)
    ] == ["cache"]
    assert (plain.cache, SUBMIT_DEFAULTS.cache) == (False, True)


def test_the_command_line_defaults_are_the_configs():
    options = {name: param.default.default for name, param in inspect.signature(cli_submit).parameters.items()}
    fields = {"levels": "num_levels", "kappa": "kappas"}
    shared = {name: fields.get(name, name) for name in options if hasattr(SUBMIT_DEFAULTS, fields.get(name, name))}
    assert len(shared) == 24  # every field but channels (an in-memory model's) and limits (--timeout, --run-timeout...)
    assert {name: options[name] for name in shared} == {
        name: getattr(SUBMIT_DEFAULTS, field) for name, field in shared.items()
    }
    assert (options["timeout"], options["load_timeout"], options["run_timeout"]) == (
        Limits().batch_timeout_s,
        Limits().load_timeout_s,
        Limits().run_timeout_s,
    )
