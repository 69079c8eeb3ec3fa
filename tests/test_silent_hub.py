"""A Hugging Face Hub that accepts connections and never answers is given up after one short timeout
(:data:`dataset_builder.hub_answer.ANSWER_TIMEOUT`), with one line that says so, where a benchmark or a builder's
source is opened from it (without the check: huggingface_hub's retries, minutes)."""

import time

import pytest
from huggingface_hub import constants

from dataset_builder.benchmark import Benchmark
from dataset_builder.errors import BenchmarkError
from dataset_builder.hub_answer import ANSWER_TIMEOUT, hub_silence
from dataset_builder.hub_source import hub_source
from silent_hub import silent_endpoint

PROMPT = ANSWER_TIMEOUT + 1.5  # the timeout, and room for a loaded machine


@pytest.fixture
def silent(monkeypatch):
    """A silent Hub in place of the local one, with the default timeouts (the test session sets long ones)."""
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", constants.DEFAULT_ETAG_TIMEOUT)
    with silent_endpoint() as url:
        monkeypatch.setattr(constants, "ENDPOINT", url)
        yield url


def timed(call) -> tuple[str, float]:
    """The BenchmarkError ``call`` raises, and the seconds it took."""
    start = time.monotonic()
    with pytest.raises(BenchmarkError) as error:
        call()
    return str(error.value), time.monotonic() - start


def test_a_benchmark_on_a_silent_hub_is_refused_after_one_short_timeout(silent):
    url = "hf://datasets/cood/tiny-glyphs@v1.0.0"
    message, seconds = timed(lambda: Benchmark.open(url))
    assert message == (
        f"cannot open {url}: cannot reach the Hugging Face Hub at {silent} (no answer in 3 s): check the network"
    )
    assert ANSWER_TIMEOUT - 0.1 < seconds < PROMPT


def test_a_builders_source_on_a_silent_hub_is_refused_after_one_short_timeout(silent):
    url = "hf://datasets/timm/imagenet-1k-wds/imagenet1k-validation-*.tar"
    message, seconds = timed(lambda: hub_source(url, None))
    assert message == f"{url}: cannot reach the Hugging Face Hub at {silent} (no answer in 3 s): check the network"
    assert seconds < PROMPT


def test_a_refused_connection_is_said_and_a_hub_that_answers_is_not(monkeypatch, hub_server):
    assert hub_silence() is None  # the local Hub answers
    with silent_endpoint() as url:
        pass  # closed: nothing listens there any more
    monkeypatch.setattr(constants, "ENDPOINT", url)
    start = time.monotonic()
    assert "refused" in hub_silence().lower() and time.monotonic() - start < 1
