import os

import pytest
from hypothesis import HealthCheck, settings

from redis_support import emptied_client, local_redis_server

# CI runs the same properties with fewer examples: the suite must stay within minutes on 2 cores.
settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="module")
def redis_server():
    """A private redis-server on a unix socket (bloomwise._redis_server), one per test module; skips when absent."""
    with local_redis_server() as server:
        yield server


@pytest.fixture
def redis_client(redis_server):
    """A redis-py client of ``redis_server``, its database emptied first."""
    with emptied_client(redis_server) as client:
        yield client
