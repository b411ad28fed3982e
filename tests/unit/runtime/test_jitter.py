"""The jitter of API retries: client-go's factor 1.0, a delay d waits between d and 2d."""

from __future__ import annotations

import pytest

from accel_plugins.runtime.backoff import jittered
from tests.support.jitter import within_jitter


@pytest.mark.parametrize(
    ("draw", "factor", "expected"),
    [
        pytest.param(0.0, 1.0, 4.0, id="least"),
        pytest.param(0.5, 1.0, 6.0, id="middle"),
        pytest.param(0.999, 1.0, 7.996, id="most"),
        pytest.param(0.5, 0.5, 5.0, id="half-factor"),
    ],
)
def test_a_delay_is_stretched_by_up_to_its_factor(
    draw: float, factor: float, expected: float
) -> None:
    assert jittered(4.0, factor, rng=lambda: draw) == pytest.approx(expected)


def test_a_fleet_retrying_together_spreads_out() -> None:
    """A thousand nodes whose API server came back: their first retries (1 s) spread over
    a second instead of landing together."""
    delays = sorted(jittered(1.0) for _ in range(1000))
    assert 1.0 <= delays[0] < 1.05
    assert 1.95 < delays[-1] <= 2.0


@pytest.mark.parametrize(
    ("slept", "ok"),
    [
        pytest.param([1.5, 2.1, 7.9], True, id="jittered"),
        pytest.param([1.0, 2.0, 4.0], False, id="not-jittered"),
        pytest.param([2.5, 2.1, 4.0], False, id="too-long"),
        pytest.param([1.5, 2.1], False, id="one-missing"),
    ],
)
def test_the_checker_tells_jitter_from_none(slept: list[float], ok: bool) -> None:
    assert within_jitter(slept, [1.0, 2.0, 4.0]) is ok
