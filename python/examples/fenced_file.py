"""A file that refuses writes with a lower fencing token than it has seen: the check a
store must make for lockd's tokens to fence anything (lockd-fenced-store does the same
over a socket). The first line holds the highest token accepted; writers take an
exclusive flock for the check and the append, so the file's order is the check's."""

import fcntl
import os
from typing import Tuple


def fenced_append(path: str, token: int, line: str) -> Tuple[bool, int]:
    """Appends ``line`` if ``token`` >= the highest token accepted; returns (accepted,
    highest)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        text = f.read()
        lines = text.splitlines()
        highest = int(lines[0].split("=", 1)[1]) if lines and lines[0].startswith("highest=") else 0
        if token < highest:
            return False, highest
        body = lines[1:] + [f"token={token} {line}"]
        f.seek(0)
        f.truncate()
        f.write(f"highest={token}\n" + "\n".join(body) + "\n")
        f.flush()
        os.fsync(f.fileno())
        return True, token
