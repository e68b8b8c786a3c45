"""Tables, JSON/CSV files and matplotlib plots of load-test and simulation results."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

SIM_COLUMNS = ("token_hit_rate", "ttft_mean_s", "ttft_p50_s", "ttft_p99_s", "e2e_mean_s",
               "goodput_rps", "rejected", "load_max_over_mean")


def simulation_table(policies: Mapping[str, Mapping[str, float]], baseline: str | None = None
                     ) -> str:
    """One row per policy; ``×base`` columns compare TTFT with ``baseline`` (same run)."""
    head = (f"{'policy':<20} {'hit':>6} {'TTFT mean':>10} {'p50':>8} {'p99':>8} {'e2e':>8} "
            f"{'goodput':>8} {'rej':>4} {'load max/mean':>13}")
    base = policies.get(baseline) if baseline else None
    if base:
        head += f" {'mean ×base':>10} {'p99 ×base':>9}"
    lines = [head]
    for name, row in policies.items():
        line = (f"{name:<20} {row['token_hit_rate']:>6.3f} {row['ttft_mean_s']:>9.3f}s "
                f"{row['ttft_p50_s']:>7.3f}s {row['ttft_p99_s']:>7.3f}s "
                f"{row['e2e_mean_s']:>7.2f}s "
                f"{row['goodput_rps']:>8.2f} {row['rejected']:>4} "
                f"{row['load_max_over_mean']:>13.3f}")
        if base:
            line += (f" {row['ttft_mean_s'] / base['ttft_mean_s']:>10.3f}"
                     f" {row['ttft_p99_s'] / base['ttft_p99_s']:>9.3f}")
        lines.append(line)
    return "\n".join(lines)


def write_json(path: str | Path, payload: object) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")


def write_csv(path: str | Path, rows: Sequence[Mapping[str, object]]) -> None:
    if not rows:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def plot_runs(runs: Mapping[str, Sequence[Mapping[str, float]]], out_dir: str | Path) -> list[Path]:
    """TTFT CDF per run, latency over time, and requests per worker; one PNG each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rows in runs.items():
        ttft = sorted(r["ttft_s"] for r in rows if r.get("ok") and r.get("ttft_s") is not None)
        if ttft:
            ax.plot(ttft, [(i + 1) / len(ttft) for i in range(len(ttft))], label=name)
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT CDF")
    ax.grid(alpha=0.3)
    ax.legend()
    paths.append(_save(fig, out_dir / "ttft_cdf.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rows in runs.items():
        done = sorted((r["start_s"], r["ttft_s"]) for r in rows
                      if r.get("ok") and r.get("ttft_s") is not None)
        if done:
            ax.plot([d[0] for d in done], [d[1] for d in done], ".", ms=3, alpha=0.6,
                    label=name)
    ax.set_xlabel("request start (s)")
    ax.set_ylabel("TTFT (s)")
    ax.set_title("Latency over time")
    ax.grid(alpha=0.3)
    ax.legend()
    paths.append(_save(fig, out_dir / "latency_over_time.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    width = 0.8 / max(len(runs), 1)
    for i, (name, rows) in enumerate(runs.items()):
        counts: dict[str, int] = {}
        for r in rows:
            if r.get("worker"):
                counts[r["worker"]] = counts.get(r["worker"], 0) + 1
        workers = sorted(counts)
        ax.bar([j + i * width for j in range(len(workers))], [counts[w] for w in workers],
               width, label=name)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(workers))], workers,
                      rotation=30, fontsize=7)
    ax.set_ylabel("requests")
    ax.set_title("Requests per worker")
    ax.legend()
    paths.append(_save(fig, out_dir / "per_worker_load.png"))
    return paths


def _save(fig: object, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
