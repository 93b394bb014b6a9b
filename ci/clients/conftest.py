"""Fixtures for the cross-client suite: a real `tributary` process on a free loopback port."""

import os
import signal
import socket
import subprocess
import time

import pytest

BIN = os.environ.get("TRIBUTARY_BIN", "target/release/tributary")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, data_dir, extra=()):
        self.data_dir = str(data_dir)
        self.port = free_port()
        self.extra = list(extra)
        self.proc = None
        os.makedirs(self.data_dir, exist_ok=True)
        self.log = open(os.path.join(self.data_dir, "..", f"broker-{self.port}.log"), "ab")

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        # A free metrics port: a broker a developer runs on the default 9644 must not stop the suite.
        args = [BIN, "--data-dir", self.data_dir, "--listen", self.bootstrap,
                "--set", "metrics.listen=127.0.0.1:0", *self.extra]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("broker did not start listening within 30s")

    def stop(self, sig=signal.SIGTERM):
        """Stops the broker; with SIGTERM it must exit 0 after flushing."""
        if self.proc is None:
            return None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        self.proc = None
        return code

    def restart(self):
        assert self.stop() == 0
        return self.start()


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data", extra=["--set", "num.partitions=1", "--set", "group.initial.rebalance.delay.ms=300"])
    b.start()
    yield b
    if b.proc is not None:
        assert b.stop() == 0, "broker must exit 0 on SIGTERM"
