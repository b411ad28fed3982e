"""Capacities written as NVIDIA's DRA driver writes them: apimachinery's canonical form of a
quantity made in binary units (``resource.NewQuantity(v, resource.BinarySI)``; the examples
are dra-driver-nvidia-gpu's own: an H100's 85520809984 bytes as ``81559Mi``, a MIG slice's
9984 MiB as ``9984Mi``)."""

from __future__ import annotations

import pytest

from accel_plugins.util.quantity import binary_si, parse_quantity


@pytest.mark.parametrize(
    ("value", "written"),
    [
        pytest.param(85520809984, "81559Mi", id="an H100's memory"),
        pytest.param(85899345920, "80Gi", id="exactly 80 GiB"),
        pytest.param(9984 << 20, "9984Mi", id="a MIG device's memory"),
        pytest.param(1536, "1536", id="not a whole KiB"),
        pytest.param(1024, "1Ki", id="one KiB"),
        pytest.param(1023, "1023", id="below 1024"),
        pytest.param(0, "0", id="zero"),
        pytest.param(98, "98", id="a count"),
        pytest.param(3 << 50, "3Pi", id="pebibytes"),
        pytest.param(1 << 60, "1Ei", id="the largest unit"),
    ],
)
def test_a_count_is_written_in_the_largest_binary_unit_that_divides_it(
    value: int, written: str
) -> None:
    assert binary_si(value) == written
    assert parse_quantity(written) == value
