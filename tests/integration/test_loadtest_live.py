"""A short live load run through the gateway: the instrument measures what it should."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import Stack


def test_live_run_writes_results_and_plots(stack: Stack, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", "--target", stack.gateway,
         "--workload", "multiturn", "--requests", "40", "--rate", "20", "--out", str(out),
         "--label", "radixgate"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((out / "results.json").read_text())
    summary = result["summary"]
    assert summary["requests"] == summary["ok"] == 40
    assert summary["token_hit_rate"] > 0.2  # multi-turn chats share their history
    assert 0 < summary["ttft_p50_s"] <= summary["ttft_p99_s"]
    rows = result["requests"]
    assert {r["worker"] for r in rows} <= {u.split("://")[1] for u in stack.workers}
    assert all(r["output_tokens"] > 0 for r in rows)
    for name in ("ttft_cdf.png", "latency_over_time.png", "per_worker_load.png",
                 "results.csv", "report.md"):
        assert (out / name).stat().st_size > 0
