"""bench-fleet's restart phase: what the fleet sends a restarted API server, and when.

The running kube-apiserver is killed (every watch of every node breaks at once) and
started again with the same command line, port, certificates and etcd, plus
an audit log of every request a node identity (``system:node:*``, our plugins) makes,
at its ``RequestReceived`` stage: one line per request with the time it arrived, which
the API server's own counters cannot give (they count a request when it ends, a watch
only when it breaks). Reported: the most requests in one second, the requests of the
first minute, and the seconds from the kill until every node watches its slices again;
the server stays down 10 s, as a restart or an upgrade of it takes.
With jitter each node's retries fall anywhere in [d, 2d]; without
(``--kube-api-retry-jitter 0``) they land in step.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

WINDOW = 60.0
OUTAGE = 10.0  # seconds the API server stays down, as a restart or an upgrade takes
POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
    "rules": [
        {"level": "Metadata", "userGroups": ["system:nodes"]},
        {"level": "None"},
    ],
}


@dataclass
class Burst:
    peak_per_second: float
    first_minute_requests: float
    seconds_to_all_watching: float  # NaN: not all within the timeout
    nodes_watching: int  # when the measurement ended


def _cmdline(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state == "Z"


def restart(
    pid: int, workdir: Path, outage: float = OUTAGE
) -> tuple[subprocess.Popen[bytes], float, Path]:
    """Kill the API server ``pid`` and start it again as it was, auditing the nodes'
    requests; (the new process, the wall-clock time it was killed, the audit log)."""
    policy, audit = workdir / "audit-policy.json", workdir / "audit.log"
    policy.write_text(json.dumps(POLICY))
    audit_flags = [f"--audit-policy-file={policy}", f"--audit-log-path={audit}"]
    argv = [*_cmdline(pid), *audit_flags, "--audit-log-mode=blocking"]
    stopped = time.time()
    # Killed, as a crash or a node's loss stops it: every connection drops at once. (A
    # SIGTERM's graceful shutdown keeps serving open watches for up to a minute.)
    os.kill(pid, signal.SIGKILL)
    while not _gone(pid):
        time.sleep(0.05)
    time.sleep(outage)  # the nodes' retries meanwhile fail and back off
    with (workdir / "kube-apiserver.log").open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    return process, stopped, audit


def _when(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def measure(audit: Path, stopped: float, nodes: int, timeout: float = 300.0) -> Burst:
    """Read the audit log until every node watches its slices again and a minute has
    passed since the kill (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        arrivals: list[float] = []
        watching: dict[str, float] = {}
        if audit.exists():
            for line in audit.read_text().splitlines():
                event = json.loads(line)
                at = _when(event["requestReceivedTimestamp"]) - stopped
                arrivals.append(at)
                ref = event.get("objectRef") or {}
                if event.get("verb") == "watch" and ref.get("resource") == "resourceslices":
                    watching.setdefault(event["user"]["username"], at)
        done = len(watching) >= nodes and time.time() - stopped >= WINDOW
        if done or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    arrivals.sort()
    peak, start = 0, 0
    for end, at in enumerate(arrivals):
        while at - arrivals[start] > 1.0:
            start += 1
        peak = max(peak, end - start + 1)
    return Burst(
        peak_per_second=float(peak),
        first_minute_requests=float(sum(1 for at in arrivals if at <= WINDOW)),
        seconds_to_all_watching=max(watching.values()) if len(watching) >= nodes else float("nan"),
        nodes_watching=len(watching),
    )
