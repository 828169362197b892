"""The plots of ``forge report``, drawn with matplotlib (Agg, no display) into PNG bytes.

Each function takes numbers already computed (scores, behaviour aggregates, cost totals, comparison
pairs) and returns one PNG; the report embeds it as a data: URI. Figures are ``Figure`` objects,
never pyplot's global state, so drawing touches no process-wide backend setting.

Invariant: matplotlib is imported only when a plot is drawn; without it, ``require`` raises
``UserError`` with the ``pip install "openforgerl[report]"`` hint and the report goes on without plots.
"""

from __future__ import annotations

import io
from typing import Any

from openforgerl.errors import UserError

REPORT_EXTRA_HINT = 'pip install "openforgerl[report]"'
DPI = 96
RATES = ("tool_coverage", "needed_coverage", "self_verified", "error_recovery", "plan_completion",
         "premature_finish", "loop")
COUNTS = ("turns", "tool_calls", "repeated_calls")


def require() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise UserError("plots need matplotlib, which is not installed", fix=REPORT_EXTRA_HINT) from exc


def _figure(width: float = 6.4, height: float = 3.6) -> Any:
    require()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _grouped(ax: Any, labels: list[str], series: dict[str, list[float | None]]) -> None:
    """Bars for each label, one colour per series (side by side); an undefined value is marked n/a."""
    width = 0.8 / max(len(series), 1)
    top = max((v for values in series.values() for v in values if v is not None), default=0.0) or 1.0
    for i, (name, values) in enumerate(series.items()):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        ax.bar(xs, [v if v is not None else 0.0 for v in values], width, label=name)
        for x, value in zip(xs, values, strict=True):
            if value is None:
                ax.text(x, top * 0.02, "n/a", rotation=90, ha="center", va="bottom", fontsize="x-small",
                        color="grey")
    ax.set_ylim(0, top * 1.08)
    ax.set_xticks(range(len(labels)), labels, rotation=25, ha="right")


def reward_distribution(rewards: dict[str, list[float]]) -> bytes:
    """Histogram of the counted final tries' rewards, per harness (bins of 0.1 over [0, 1], wider if needed)."""
    figure = _figure()
    ax = figure.subplots()
    values = [r for rows in rewards.values() for r in rows]
    low, high = min([0.0, *values]), max([1.0, *values])
    edges = [low + (high - low) * i / 10 for i in range(11)]
    ax.hist(list(rewards.values()), bins=edges, label=list(rewards), rwidth=0.9)
    ax.set_xlabel("reward")
    ax.set_ylabel("rollouts")
    ax.set_title("Reward distribution (final tries, counted)")
    ax.legend()
    return _png(figure)


def pass_at_k_curves(curves: dict[str, list[tuple[int, float]]]) -> bytes:
    """pass@k against k, one line per harness."""
    figure = _figure()
    ax = figure.subplots()
    for name, points in curves.items():
        ax.plot([k for k, _ in points], [v for _, v in points], marker="o", label=name)
    ax.set_xlabel("k (attempts)")
    ax.set_ylabel("pass@k")
    ax.set_ylim(-0.03, 1.03)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("pass@k (unbiased estimator, mean over tasks)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(figure)


def behaviour_bars(behaviour: dict[str, dict[str, Any]]) -> bytes:
    """Rates (0..1) and per-rollout counts, grouped by metric, one colour per harness."""
    figure = _figure(9.0, 3.8)
    rates_ax, counts_ax = figure.subplots(1, 2, width_ratios=[2.2, 1])
    _grouped(rates_ax, list(RATES), {h: [row.get(m) for m in RATES] for h, row in behaviour.items()})
    rates_ax.set_ylim(0, 1.05)
    rates_ax.set_title("Rates (n/a: undefined for every rollout)")
    rates_ax.legend(fontsize="small")
    _grouped(counts_ax, list(COUNTS), {h: [row.get(m) for m in COUNTS] for h, row in behaviour.items()})
    counts_ax.set_title("Mean per rollout")
    return _png(figure)


def cost_bars(cost: dict[str, dict[str, Any]], phases: tuple[str, ...]) -> bytes:
    """Mean seconds per rollout, stacked by phase, one bar per harness."""
    figure = _figure(6.4, 1.4 + 0.4 * max(len(cost), 2))
    ax = figure.subplots()
    names = list(cost)
    left = [0.0] * len(names)
    for phase in phases:
        widths = [cost[n]["seconds"].get(phase, 0.0) / max(cost[n]["rollouts"], 1) for n in names]
        if any(widths):
            ax.barh(names, widths, left=left, label=phase)
            left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds per rollout")
    ax.set_title("Where the time went")
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    return _png(figure)


def delta_plot(pairs: list[dict[str, Any]], name_a: str, name_b: str) -> bytes:
    """Per task: B - A in pass@1 (bars) and in mean reward (dots)."""
    labels = [p["task"] if p["harness"] == "*" else f"{p['harness']}/{p['task']}" for p in pairs]
    figure = _figure(6.4, 1.0 + 0.32 * max(len(pairs), 3))
    ax = figure.subplots()
    positions = list(range(len(pairs)))
    ax.barh(positions, [p["delta_pass@1"] for p in pairs], color=["#2e8b57" if p["delta_pass@1"] >= 0 else "#c0392b"
                                                                   for p in pairs], label="Δ pass@1")
    ax.scatter([p["delta_reward"] for p in pairs], positions, color="black", zorder=3, s=14, label="Δ mean reward")
    ax.set_yticks(positions, labels)
    ax.invert_yaxis()
    ax.axvline(0, color="grey", linewidth=0.8)
    reach = max([1.0, *(abs(p["delta_reward"]) for p in pairs)])
    ax.set_xlim(-1.05 * reach, 1.05 * reach)
    ax.set_title(f"{name_b} − {name_a}, per task")
    ax.legend(fontsize="small")
    return _png(figure)
