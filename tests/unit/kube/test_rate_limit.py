"""--kube-api-qps and --kube-api-burst: a token bucket in front of every API request.

The bucket's arithmetic runs on a fake clock (asyncio.sleep advances it); the wiring is
checked on a real API server, where the limit can only make requests slower: a lower
bound on the time taken, never an upper one.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest

from accel_plugins.kube.rate_limit import RateLimit, TokenBucket
from tests.support.cli import run_cli

if TYPE_CHECKING:
    from accel_plugins.conformance.envtest import ApiServer


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(
    ("limit", "requests", "starts"),
    [
        pytest.param(RateLimit(5, 10), 3, [0.0, 0.0, 0.0], id="within-burst"),
        pytest.param(RateLimit(5, 2), 4, [0.0, 0.0, 0.2, 0.4], id="past-burst-at-qps"),
        pytest.param(RateLimit(0, 1), 4, [0.0, 0.0, 0.0, 0.0], id="qps-0-no-limit"),
    ],
)
async def test_requests_start_at_the_buckets_pace(
    limit: RateLimit, requests: int, starts: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTime()
    monkeypatch.setattr(asyncio, "sleep", fake.sleep)
    bucket = TokenBucket(limit, clock=fake.clock)
    seen = []
    for _ in range(requests):
        await bucket.take()
        seen.append(round(fake.now, 6))
    assert seen == starts


@pytest.mark.parametrize(("qps", "burst"), [(-1.0, 10), (5.0, 0)])
def test_a_bad_limit_is_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="qps must be >= 0 and burst >= 1"):
        RateLimit(qps, burst)


def test_a_bad_flag_exits_2_naming_it() -> None:
    result = run_cli("generic", "--kube-api-burst", "0", "--metrics-address", "")
    assert result.returncode == 2
    assert "--kube-api-qps/--kube-api-burst" in result.stderr
    assert "burst >= 1" in result.stderr


async def test_every_api_request_goes_through_the_bucket(kube_apiserver: ApiServer) -> None:
    pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")
    from lightkube import KubeConfig
    from lightkube.resources.core_v1 import Namespace

    from accel_plugins.kube.client import make_client

    client = make_client(
        KubeConfig.from_dict(kube_apiserver.kubeconfig()), limit=RateLimit(qps=5, burst=1)
    )
    try:
        started = time.monotonic()
        for _ in range(4):
            await client.get(Namespace, "default")
        # One at once, then one each 0.2 s: at least 0.6 s, however fast the server.
        assert time.monotonic() - started >= 0.6
    finally:
        await client.close()
