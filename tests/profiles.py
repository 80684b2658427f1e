"""Hypothesis profiles of the test suite, registered by ``tests/conftest.py``.

* ``ci`` (the default): derandomised, so a run is reproducible and a CI
  failure reappears locally with the same examples; the example counts the
  tests ask for.
* ``slow``: random (a new search each run) and ten times the examples, for a
  deeper search: ``pytest --hypothesis-profile slow`` (or
  ``HYPOTHESIS_PROFILE=slow``).

A test that sets its own ``max_examples`` passes it through ``examples(n)``,
so the profile scales it.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

BASE_EXAMPLES = 100  # hypothesis's default max_examples, the unit of a profile's scale

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "slow",
    max_examples=10 * BASE_EXAMPLES,
    derandomize=False,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def examples(n: int) -> int:
    """``n`` examples under ``ci``, scaled like ``max_examples`` under other profiles."""
    return max(1, n * settings.default.max_examples // BASE_EXAMPLES)
