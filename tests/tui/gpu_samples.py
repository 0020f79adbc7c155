"""Recorded-style NVML ``gpu`` samples of an H200 SXM, for tests without a GPU.

Labelled as such: these are not read from a card. The figures are shaped like an H200's
(700 W enforced limit, 132 SMs at up to 1980 MHz, HBM3e at 2619 MHz, PCIe Gen5, no fan: the SXM
module is cooled by the chassis, so NVML reports no fan speed, and volatile ECC counts at zero),
and the utilisation follows the run's own GPU lane, so a stall in a worker lane shows as a dip.
"""

from __future__ import annotations

from typing import Any

from provetop.recordings.state import State

H200_POWER_LIMIT_MW = 700_000
ENGINE_PID = 4242  # the synthetic hello's pid


def h200_samples(events: list[dict[str, Any]], devices: int = 2) -> list[dict[str, Any]]:
    """One ``gpu`` event per device per second of ``events``' span (recorded-style), merged
    into the run's events in time order, with the hello switched to the cuda backend."""
    state = State().fold(events)
    end = max(e["t"] for e in events)
    samples: list[dict[str, Any]] = []
    for second in range(1, int(end // 1_000_000_000) + 1):
        t = second * 1_000_000_000
        for d in range(devices):
            busy = state.busy_fraction(d, t - 1_000_000_000, t)
            samples.append(
                {
                    "k": "gpu",
                    "t": t,
                    "device": d,
                    "sm_util_pct": round(busy * 100),
                    "mem_util_pct": round(busy * 45),
                    "power_mw": 110_000 + round(busy * 560_000),
                    "power_limit_mw": H200_POWER_LIMIT_MW,
                    "temp_c": 38 + round(busy * 26),
                    "sm_clock_mhz": 1980 if busy else 345,
                    "mem_clock_mhz": 2619,
                    "pcie_rx_bytes_s": round(busy * 22 * (1 << 30)),
                    "pcie_tx_bytes_s": round(busy * 1.5 * (1 << 30)),
                    "ecc_corrected": 0,
                    "ecc_uncorrected": 0,
                    "retired_pages": 0,
                    "processes": [
                        {
                            "pid": ENGINE_PID,
                            "used": round((40 + busy * 60) * (1 << 30)),
                            "user": "prover",
                            "command": "python3 -m provetop engine --preset porep-32g",
                        },
                        {"pid": 31337, "used": 2 << 30},  # another PID namespace: no /proc
                    ],
                }
            )
    merged = sorted(events + samples, key=lambda e: e["t"])  # stable: hello stays first
    hello = dict(merged[0], backend="cuda", modeled=False)
    hello["devices"] = [dict(d, name="NVIDIA H200", modeled=False) for d in hello["devices"]]
    return [hello, *merged[1:]]
