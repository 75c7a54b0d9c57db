"""Reading Ray's Prometheus endpoint in tests: wait for a metric, then read its samples."""

from __future__ import annotations

import time
import urllib.request


def scrape(port: int, needle: str, timeout_s: float = 60.0) -> str:
    """The metrics page on 127.0.0.1:``port`` once it mentions ``needle`` (Ray exports every few seconds)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            if needle in body:
                return body
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{needle} never appeared on Ray's metrics port {port}")


def samples(body: str, name: str, **labels: str) -> list[float]:
    """Every sample of ``name`` whose labels include ``labels`` (one per reporting process)."""
    out = []
    for line in body.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            out.append(float(line.rsplit(" ", 1)[1]))
    return out


def value(body: str, name: str, **labels: str) -> float:
    found = samples(body, name, **labels)
    if not found:
        raise AssertionError(f"no sample {name} {labels}")
    return found[0]
