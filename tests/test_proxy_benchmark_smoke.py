"""The proxy benchmark's CI-sized run: it must run end to end and write its report (Squid left out here; the
interop tests cover it)."""
import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("aiohttp", reason="the proxy benchmark needs aiohttp (the proxy extra)")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quick_proxy_benchmark_writes_its_report(tmp_path):
    # its own process group, so that a time-out also ends the origin and proxies it started
    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "benchmarks", "proxy.py"), "--quick",
                                "--no-squid", "--requests", "100", "--churn-seconds", "1", "--out", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=400)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    assert process.returncode == 0, stderr[-3000:]
    [raw] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    results = json.loads(raw.read_text())
    [b] = results["bloomwise"]
    assert b["remote"]["remote_hit_fraction"] == 1.0
    assert 0 < b["miss"]["route_share"] < 1
    assert [c["threshold"] for c in results["churn"]] == ["1%", "10%"]
    report = [p for p in tmp_path.iterdir() if p.suffix == ".md"][0].read_text()
    assert "| local hits | bloomwise |" in report and "summary bytes/s" in report
