"""Whether the Hugging Face Hub answers, asked once with a short timeout before a command reaches it. Without it, a
Hub that does not answer (a network that drops the packets, a proxy that holds the connection, a refused connection)
costs ``huggingface_hub``'s retries with growing timeouts and waits (half a minute to minutes) before the same error.
"""

from __future__ import annotations

from dataset_builder.errors import BenchmarkError

ANSWER_TIMEOUT = 3.0  # seconds the Hub has to answer; HF_HUB_ETAG_TIMEOUT, where set, replaces it


def answer_timeout() -> float:
    """The seconds the Hub has to answer: :data:`ANSWER_TIMEOUT`, or ``HF_HUB_ETAG_TIMEOUT`` where it is set."""
    from huggingface_hub import constants

    if constants.HF_HUB_ETAG_TIMEOUT != constants.DEFAULT_ETAG_TIMEOUT:
        return float(constants.HF_HUB_ETAG_TIMEOUT)
    return ANSWER_TIMEOUT


def hub_silence() -> str | None:
    """None when the Hub at ``HF_ENDPOINT`` answers one request (any HTTP status is an answer) within
    :func:`answer_timeout`; else why not, in a few words (``no answer in 3 s``, ``[Errno 111] Connection refused``).
    Through ``huggingface_hub``'s own HTTP session, so with its proxies and certificates."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    timeout = answer_timeout()
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception as exc:  # any failure to get an answer: the client's timeout and network errors differ by version
        if "timeout" in type(exc).__name__.lower():
            return f"no answer in {timeout:g} s"
        return (str(exc).splitlines() or [type(exc).__name__])[0]
    return None


def silent_hub(what: str) -> None:
    """Raise a BenchmarkError (``what`` opens it) when the Hub does not answer (:func:`hub_silence`); offline
    (``HF_HUB_OFFLINE``) the Hub is not asked, ``huggingface_hub`` says so itself."""
    from huggingface_hub import constants

    why = None if constants.HF_HUB_OFFLINE else hub_silence()
    if why is not None:
        raise BenchmarkError(
            f"{what}: cannot reach the Hugging Face Hub at {constants.ENDPOINT} ({why}): check the network"
        )
