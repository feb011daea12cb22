"""A minimal pexpect-like driver on the stdlib `pty` module (no extra test dependency)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import time


class PtyProcess:
    def __init__(self, argv: list[str], env: dict, cwd: str) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # child
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        self.buffer = ""
        self.transcript = ""

    def _read(self, timeout: float) -> bool:
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            return False
        if not data:
            return False
        text = data.decode("utf-8", "replace")
        # match against what a reader would see: cursor-forward as a space, other escapes gone
        clean = re.sub(r"\x1b\[\d*C", " ", text)
        clean = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-Za-z]|[\x08\r]", "", clean)
        self.buffer += clean
        self.transcript += text
        return True

    def expect(self, pattern: str, timeout: float = 15.0) -> re.Match:
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            m = rx.search(self.buffer)
            if m:
                self.buffer = self.buffer[m.end() :]
                return m
            left = deadline - time.monotonic()
            if left <= 0 or (
                not self._read(min(left, 0.2)) and not self.alive() and not rx.search(self.buffer)
            ):
                if left <= 0 or not self.alive():
                    raise TimeoutError(f"{pattern!r} not seen; output:\n{self.transcript[-2000:]}")

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def sendline(self, text: str) -> None:
        self.send(text + "\r")

    def sendintr(self) -> None:
        self.send("\x03")

    def sendeof(self) -> None:
        self.send("\x04")

    def alive(self) -> bool:
        pid, _ = os.waitpid(self.pid, os.WNOHANG) if self.pid else (1, 0)
        if pid:
            self._status = _
            self.pid = 0
        return self.pid != 0

    def wait(self, timeout: float = 15.0) -> int:
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            self._read(0.1)
        if self.alive():
            self.kill(signal.SIGKILL)
            raise TimeoutError("process did not exit")
        while self._read(0.05):
            pass
        return os.waitstatus_to_exitcode(self._status)

    def kill(self, sig: int) -> None:
        if self.pid:
            os.kill(self.pid, sig)
            os.waitpid(self.pid, 0)
            self.pid = 0

    def close(self) -> None:
        if self.pid:
            self.kill(signal.SIGKILL)
        try:
            os.close(self.fd)
        except OSError:
            pass
