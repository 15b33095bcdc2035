import os

from hypothesis import HealthCheck, settings

# CI runs the same properties with fewer examples: the suite must stay within minutes on 2 cores.
settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")
