"""The run's options: one frozen :class:`EvalConfig` that refuses what cannot work in one line and holds the defaults
that ``evaluate()``, ``submit()``, the command line and the request worker share."""

import dataclasses
import inspect

import pytest

from harness.cli import submit as cli_submit
from harness.config import (
    LIMIT_OPTIONS,
    NOT_OPTIONS,
    RENAMED_OPTIONS,
    SUBMIT_DEFAULTS,
    EvalConfig,
    Limits,
    config_from_options,
)
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


def cli_options() -> dict:
    """The command line's options of ``submit`` with their defaults, by parameter name."""
    return {name: param.default.default for name, param in inspect.signature(cli_submit).parameters.items()}


def field_of(option: str) -> str | None:
    """The config field an option sets (None for options that are not fields, such as the target)."""
    name = RENAMED_OPTIONS.get(option, option)
    return name if name in {f.name for f in dataclasses.fields(EvalConfig)} else None


def test_every_field_of_the_config_is_an_option_of_the_command_line_with_the_configs_default():
    options = cli_options()
    given = {field_of(name) for name in options} - {None}
    missing = {f.name for f in dataclasses.fields(EvalConfig)} - given - {"limits", *NOT_OPTIONS}
    assert not missing, f"fields with no option of cood-harness submit: {sorted(missing)}"
    for name in options:
        if field_of(name) and field_of(name) != "kappas":
            assert options[name] == getattr(SUBMIT_DEFAULTS, field_of(name)), name
    assert set(LIMIT_OPTIONS.values()) <= {f.name for f in dataclasses.fields(Limits)}
    for option, limit in LIMIT_OPTIONS.items():
        assert options[option] in (None, getattr(Limits(), limit)), option


def test_each_option_sets_its_field_of_the_config():
    defaults = cli_options()
    assert config_from_options(defaults) == SUBMIT_DEFAULTS
    # the string fields the config checks: a valid other
    checked = {"decoder": "pil", "feature_dtype": "float16", "severity_rule": "original"}
    changed = {bool: lambda v: not v, int: lambda v: v + 3, float: lambda v: v * 2, str: lambda v: v + "2"}
    for option, default in defaults.items():
        field = field_of(option)
        if field is None or default is None or type(default) not in changed:
            continue
        value = checked.get(field) or changed[type(default)](default)
        assert getattr(config_from_options(defaults | {option: value}), field) == value, option
    assert config_from_options(defaults | {"kappa": ["softmax"]}).kappas == ("softmax",)
    assert config_from_options(defaults | {"quiet": True}).progress is False
    limits = config_from_options(defaults | {"timeout": 5.0, "memory_limit": 1.5}).limits
    assert (limits.batch_timeout_s, limits.memory_bytes) == (5.0, int(1.5 * 2**30))
