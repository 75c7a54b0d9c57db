"""A real Prometheus server for tests: Debian's ``prometheus`` package, scraping loopback targets.

The binary is ``prometheus`` on the PATH, or Debian's package fetched with ``apt-get download`` and
unpacked with ``dpkg-deb -x`` into a cache folder (no root, nothing installed system-wide). Where neither
works the test fails with the reason: a dashboard test that silently skips would pass on nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ..ports import free_port

CACHE = Path.home() / ".cache" / "specagent-ray" / "prometheus"


def _run(*cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def prometheus_binary(cache: Path = CACHE) -> Path:
    """Prometheus from the PATH, or Debian's package unpacked under ``cache``."""
    found = shutil.which("prometheus")
    if found:
        return Path(found)
    unpacked = cache / "usr" / "bin" / "prometheus"
    if unpacked.exists():
        return unpacked
    cache.mkdir(parents=True, exist_ok=True)
    got = _run("apt-get", "download", "prometheus", cwd=cache)
    if got.returncode != 0:  # package lists not fetched yet on this machine
        _run("apt-get", "update")
        got = _run("apt-get", "download", "prometheus", cwd=cache)
    debs = sorted(cache.glob("prometheus_*.deb"))
    if got.returncode != 0 or not debs:
        raise RuntimeError(f"could not fetch Debian's prometheus package: {got.stderr.strip()[-400:]}")
    unpack = _run("dpkg-deb", "-x", str(debs[-1]), str(cache))
    if unpack.returncode != 0 or not unpacked.exists():
        raise RuntimeError(f"could not unpack {debs[-1].name}: {unpack.stderr.strip()[-400:]}")
    return unpacked


class PrometheusServer:
    """Prometheus on a free loopback port, scraping ``targets`` (host:port) every ``interval``; stopped
    and its data removed on exit."""

    def __init__(self, targets: list[str], interval: str = "5s"):  # the scrape timeout is the interval
        self.targets, self.interval = targets, interval
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir: tempfile.TemporaryDirectory | None = None
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> PrometheusServer:
        self._dir = tempfile.TemporaryDirectory(prefix="prometheus-")
        root = Path(self._dir.name)
        config = {"global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
                  "scrape_configs": [{"job_name": "ray", "static_configs": [{"targets": self.targets}]}]}
        (root / "prometheus.yml").write_text(json.dumps(config))  # YAML is a superset of JSON
        with open(root / "prometheus.log", "w") as log:
            self._proc = subprocess.Popen(
                [str(prometheus_binary()), f"--config.file={root / 'prometheus.yml'}",
                 f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=subprocess.DEVNULL, stderr=log)
        try:
            self._wait(lambda: urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).status == 200, 60, "ready")
        except BaseException:
            self.__exit__()  # a server that never got ready is stopped, not left behind
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._dir is not None:
            self._dir.cleanup()

    def log(self) -> str:
        return (Path(self._dir.name) / "prometheus.log").read_text()[-2000:] if self._dir else ""

    def _wait(self, ok, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited ({self._proc.returncode}): {self.log()}")
            try:
                if ok():
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"prometheus not {what} after {timeout_s:g}s: {self.log()}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector; a PromQL error raises with Prometheus's message."""
        q = urllib.parse.urlencode({"query": expr})
        try:
            body = json.loads(urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10).read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read())
        if body.get("status") != "success":
            raise ValueError(f"{expr}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]["result"]

    def wait_up(self, timeout_s: float = 120) -> None:
        """Until every target has been scraped successfully; the timeout names each target's last error."""
        def up() -> bool:
            result = self.query("up")
            return len(result) == len(self.targets) and all(r["value"][1] == "1" for r in result)
        try:
            self._wait(up, timeout_s, "scraping every target")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\ntargets: {self.target_health()}") from None

    def target_health(self) -> list[dict[str, Any]]:
        """Each active target's URL, health, last error and last scrape's duration, from Prometheus."""
        body = json.loads(urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10).read())
        keys = ("scrapeUrl", "health", "lastError", "lastScrapeDuration")
        return [{k: t.get(k) for k in keys} for t in body["data"]["activeTargets"]]
