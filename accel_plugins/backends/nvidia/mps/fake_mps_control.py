"""A stand-in for ``nvidia-cuda-mps-control``, for tests, ``demo`` and ``--simulate``.

Run as ``python -m accel_plugins.backends.nvidia.mps.fake_mps_control`` with the
real program's arguments and environment (``CUDA_MPS_PIPE_DIRECTORY``,
``CUDA_MPS_LOG_DIRECTORY``):

- ``-f``: the control daemon in the foreground. It listens on ``control`` in
  the pipe directory (a unix socket here; the real one uses named pipes),
  writes its PID to ``nvidia-cuda-mps-control.pid`` there, and appends every
  command it is sent, one a line, to ``commands`` in the log directory. It
  answers ``get_default_active_thread_percentage`` with what was set, and
  exits on ``quit`` or SIGTERM.
- ``-d``: the same daemon, detached; returns once it listens.
- no argument: the client. Sends its standard input to the daemon and prints
  the answer; exit 1 when no daemon listens, as the real client fails.

No GPU is touched and nothing is enforced: the recorded commands are what a
test checks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from pathlib import Path
from types import FrameType

SOCKET_NAME = "control"
PID_FILE = "nvidia-cuda-mps-control.pid"
COMMANDS_FILE = "commands"
_READY_FD = "FAKE_MPS_CONTROL_READY_FD"


def _dirs() -> tuple[Path, Path]:
    try:
        return (
            Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"]),
            Path(os.environ["CUDA_MPS_LOG_DIRECTORY"]),
        )
    except KeyError as exc:
        print(f"fake nvidia-cuda-mps-control: {exc.args[0]} is not set", file=sys.stderr)
        raise SystemExit(1) from None


def _answer(line: str, state: dict[str, str]) -> str:
    words = line.split()
    if words[0] == "set_default_active_thread_percentage" and len(words) == 2:
        state["percentage"] = f"{float(words[1]):.1f}"
    elif words[0] == "get_default_active_thread_percentage":
        return state.get("percentage", "100.0") + "\n"
    return ""


def _stop(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)


def serve() -> int:
    pipe, log = _dirs()
    pipe.mkdir(parents=True, exist_ok=True)
    log.mkdir(parents=True, exist_ok=True)
    # Bind by a relative name: a deep pipe directory would pass the 108-byte socket path limit.
    os.chdir(pipe)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(SOCKET_NAME)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(SOCKET_NAME)
    server.listen(8)
    Path(PID_FILE).write_text(f"{os.getpid()}\n")
    signal.signal(signal.SIGTERM, _stop)
    print(f"fake MPS control daemon listening in {pipe}", flush=True)
    ready = os.environ.pop(_READY_FD, "")
    if ready:
        os.write(int(ready), b"1")
        os.close(int(ready))
    state: dict[str, str] = {}
    try:
        with (log / COMMANDS_FILE).open("a") as record:
            while True:
                conn, _ = server.accept()
                with conn:
                    data = b""
                    while chunk := conn.recv(4096):
                        data += chunk
                    quit_now = False
                    out = ""
                    for line in data.decode().splitlines():
                        if not line.strip():
                            continue
                        record.write(line.strip() + "\n")
                        record.flush()
                        out += _answer(line, state)
                        quit_now = quit_now or line.split()[0] == "quit"
                    if quit_now:  # gone before the answer: no client reaches a closing daemon
                        os.unlink(SOCKET_NAME)
                        server.close()
                    conn.sendall(out.encode())
                if quit_now:
                    print("fake MPS control daemon: quit", flush=True)
                    return 0
    finally:
        with contextlib.suppress(OSError):
            os.unlink(SOCKET_NAME)
        with contextlib.suppress(OSError):
            os.unlink(PID_FILE)


def detach() -> int:
    """``-d``: fork the daemon into its own session and return once it listens."""
    read, write = os.pipe()
    if os.fork() == 0:  # the daemon: no exec, the same code in the child
        code = 1
        try:
            os.close(read)
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.environ[_READY_FD] = str(write)
            code = serve()
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as ready:
        return 0 if ready.read(1) else 1


def client() -> int:
    pipe, _ = _dirs()
    data = sys.stdin.buffer.read()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(pipe)
        conn.connect(SOCKET_NAME)
    except OSError as exc:
        print(f"Cannot find MPS control daemon process ({exc})", file=sys.stderr)
        return 1
    with conn:
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        while chunk := conn.recv(4096):
            sys.stdout.buffer.write(chunk)
    sys.stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    if argv == ["-f"]:
        return serve()
    if argv == ["-d"]:
        return detach()
    if not argv:
        return client()
    print(f"fake nvidia-cuda-mps-control: unsupported arguments {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
