"""``forge report``: one self-contained HTML file about one or more runs, read offline.

Per run: what ran (model, harnesses, tasks, statuses, problems found while loading), scores
(pass@k, pass^k, mean reward; overall and per task), behaviour (each metric with its definition),
cost (time per phase, tokens, retries) and plots; for two runs or more, the per-task comparison
of each later run with the first (deltas, sign test, permutation test). Then every rollout in a
list, and a viewer page per rollout (``#rollout/<id>``, see ``report_viewer``), up to ``MAX_VIEWERS``.

Invariant: the file needs nothing but itself — styles, script and PNG plots are inline, nothing is
fetched — and everything read from a run directory is escaped (``report_html``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openforgerl.errors import ForgeError
from openforgerl.evaluation import report_plots as plots
from openforgerl.evaluation.behaviour import DEFINITIONS
from openforgerl.evaluation.compare import compare
from openforgerl.evaluation.cost import PHASES
from openforgerl.evaluation.estimators import mean, pass_at_k
from openforgerl.evaluation.report_html import Html, fmt, h, join, link, note, page, pct, png, table
from openforgerl.evaluation.report_viewer import DecoderFor, RolloutPage, TokenText, load_decoder, viewer
from openforgerl.evaluation.runs import RunData, load_run
from openforgerl.evaluation.scores import EXCLUDED, final_tries

log = logging.getLogger(__name__)

MAX_VIEWERS = 200
"""Rollouts with a full viewer page; the rest are listed without one."""
EVAL_KEYS = ("ks", "harnesses", "behaviour", "cost")
"""What an eval.json must hold to be shown as it is."""
BEHAVIOUR_ROWS = ("rollouts", "turns", "tokens_in", "tokens_out", "tool_calls", "tool_coverage", "needed_coverage",
                  "self_verified", "errors", "recovered", "error_recovery", "plan_completion", "premature_finish",
                  "repeated_calls", "loop")


@dataclass
class RunReport:
    """One run directory, scored."""

    data: RunData
    label: str
    evaluation: dict[str, Any]
    model: str
    anchor: str = ""
    plots: list[Html] = field(default_factory=list)


def write_report(run_dirs: list[Path], out: Path | None = None, ks: list[int] | None = None, *,
                 decoder_for: DecoderFor = load_decoder) -> Path:
    """Write the report of ``run_dirs`` (the first is the baseline of comparisons) to ``out``
    (default ``<first run dir>/report.html``); returns its path. ``ks``: the k of pass@k / pass^k
    (default: eval.json's, else 1 and the smallest attempts count). ``decoder_for(model)``: the
    policy's tokenizer for the viewers (``ForgeError`` or ``ImportError`` when it cannot be had)."""
    return write_report_and_summary(run_dirs, out, ks, decoder_for=decoder_for)[0]


def write_report_and_summary(run_dirs: list[Path], out: Path | None = None, ks: list[int] | None = None, *,
                             decoder_for: DecoderFor = load_decoder) -> tuple[Path, str]:
    """``write_report``, and the runs' pass@1 side by side as plain text (``summary``) for a terminal."""
    runs = [score(load_run(path), ks) for path in run_dirs]
    _label(runs)
    out = Path(out) if out is not None else Path(run_dirs[0]) / "report.html"
    plot_problem = _plots(runs)
    body = join([header(runs, plot_problem), *(run_section(run) for run in runs), comparisons(runs),
                 rollouts(runs, decoder_for)])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(f"forge report: {', '.join(r.label for r in runs)}", body), encoding="utf-8")
    return out, summary(runs)


SUMMARY_TASKS = 12
"""Per-task rows in the terminal summary when a harness has at most this many tasks."""


def summary(runs: list[RunReport]) -> str:
    """pass@1 (successes / counted rollouts) per harness in each run, and per task while few; with two runs
    or more, the last run minus the first. Plain text, aligned, for the end of ``forge report``."""
    from openforgerl.evaluation.scores import run_scores

    scored = [run_scores(run.data.results, [1])["harnesses"] for run in runs]
    harnesses = sorted({name for harnesses in scored for name in harnesses})
    header = ["harness / task", *(run.label for run in runs)] + (["change"] if len(runs) > 1 else [])
    rows: list[list[str]] = []

    def row(label: str, cells: list[dict[str, Any] | None]) -> list[str]:
        texts = [f"{c['pass@1']:.2f} ({c['successes']}/{c['n']})" if c and c["n"] else "-" for c in cells]
        if len(runs) > 1:
            first, last = cells[0], cells[-1]
            change = (last["pass@1"] - first["pass@1"]) if first and last and first["n"] and last["n"] else None
            texts.append(f"{change:+.2f}" if change is not None else "-")
        return [label, *texts]

    for name in harnesses:
        entries = [harnesses.get(name) for harnesses in scored]
        tasks = sorted({task for entry in entries if entry for task in entry["tasks"]})
        totals = [None if entry is None else {"pass@1": entry["overall"]["pass@1"] or 0.0,
                                              "successes": sum(t["successes"] for t in entry["tasks"].values()),
                                              "n": entry["overall"]["n"]} for entry in entries]
        rows.append(row(name or "(no harness)", totals))
        if 1 < len(tasks) <= SUMMARY_TASKS:
            rows += [row(f"  {task}", [entry["tasks"].get(task) if entry else None for entry in entries])
                     for task in tasks]
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) if i == 0 else cell.rjust(width) for i, (cell, width)
                       in enumerate(zip(line, widths, strict=True))).rstrip() for line in [header, *rows]]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:],
                      "pass@1 per harness: the mean over its tasks of each task's success rate (successes / counted "
                      "rollouts)."])


def score(data: RunData, ks: list[int] | None) -> RunReport:
    """The run's eval.json as it is when it has everything and no other ks were asked for; else scored now."""
    evaluation = data.eval
    if ks is not None or not evaluation or not all(key in evaluation for key in EVAL_KEYS):
        from openforgerl.evaluation.runner import evaluate

        evaluation = evaluate(data, sorted(set(ks or default_ks(data.results))))
    models = {str(run.config["model"]) for run in data.runs if run.config.get("model")}
    model = str(evaluation.get("model") or ", ".join(sorted(models)) or "")
    return RunReport(data, data.name, evaluation, model)


def default_ks(results: list[dict[str, Any]]) -> list[int]:
    """1 and the fewest attempts any (harness, task) has."""
    attempts = Counter((r.get("harness", ""), r["task"]) for r in final_tries(results))
    return sorted({1, min(attempts.values(), default=1)})


def _label(runs: list[RunReport]) -> None:
    """Names that tell runs apart (the directory's name, with its parent's when two share it)."""
    names = Counter(run.data.name for run in runs)
    for i, run in enumerate(runs, 1):
        run.label = run.data.name if names[run.data.name] == 1 else f"{run.data.path.parent.name}/{run.data.name}"
        run.anchor = f"run-{i}"


def _plots(runs: list[RunReport]) -> str:
    """Draw every run's plots; '' when drawn, else why not (the report goes on without them)."""
    try:
        plots.require()
    except ForgeError as exc:
        log.warning("report without plots: %s", exc)
        return str(exc)
    for run in runs:
        run.plots = run_plots(run)
    return ""


def header(runs: list[RunReport], plot_problem: str) -> Html:
    toc = [link(f"#{run.anchor}", run.label) for run in runs]
    toc += [link("#comparisons", "comparisons")] if len(runs) > 1 else []
    toc += [link("#rollouts", "rollouts")]
    parts = ['<div id="overview">', f"<h1>forge report: {h(', '.join(r.label for r in runs))}</h1>",
             f'<nav class="toc">{"".join(toc)}</nav>',
             note(f"Made {time.strftime('%Y-%m-%d %H:%M:%S')} from {len(runs)} run director"
                  f"{'ies' if len(runs) > 1 else 'y'}.")]
    if plot_problem:
        parts.append(note(f"No plots: {plot_problem}", "warn"))
    return join(parts)


def run_section(run: RunReport) -> Html:
    data, evaluation = run.data, run.evaluation
    results = data.results
    final = final_tries(results)
    statuses = Counter(r["status"] for r in final)
    harnesses = sorted({r.get("harness", "") for r in results})
    facts = [("directory", str(data.path)), ("model", run.model or "-"), ("harnesses", ", ".join(harnesses)),
             ("tasks", len({r["task"] for r in results})),
             ("rollouts", f"{len(final)} ({', '.join(f'{s} {n}' for s, n in statuses.most_common())})"),
             ("tries", f"{len(results)} ({len(results) - len(final)} infra retries)"),
             ("pass@k for k in", ", ".join(map(str, evaluation["ks"])))]
    problems = list(dict.fromkeys([*data.problems, *evaluation.get("problems", [])]))
    parts = [f'<section class="run" id="{h(run.anchor)}"><h2>Run {h(run.label)}</h2><dl class="facts">',
             *(f"<dt>{h(k)}</dt><dd>{h(v)}</dd>" for k, v in facts), "</dl>"]
    if problems:
        parts += ["<h3>Problems found while loading</h3><ul class=problems>",
                  *(f"<li>{h(p)}</li>" for p in problems), "</ul>"]
    parts += [scores_tables(evaluation), behaviour_table(evaluation), cost_table(evaluation)]
    if run.plots:
        parts += ["<h3>Plots</h3><div class=plots>", *run.plots, "</div>"]
    parts.append("</section>")
    return join(parts)


def score_keys(ks: list[int]) -> list[str]:
    return [f"pass@{k}" for k in ks] + [f"pass^{k}" for k in ks if k > 1] + ["mean_reward"]


def scores_tables(evaluation: dict[str, Any]) -> Html:
    keys = score_keys(evaluation["ks"])
    overall_rows = []
    task_rows = []
    for harness, entry in evaluation["harnesses"].items():
        o = entry["overall"]
        short = ", ".join(f"{k}: {n}" for k, n in (o.get("short") or {}).items())
        overall_rows.append([harness, o["tasks"], o["n"], *(o.get(k) for k in keys),
                             *(o.get(s, 0) for s in EXCLUDED), short or "-"])
        for task, s in entry["tasks"].items():
            task_rows.append([harness, task, s["n"], s.get("successes"), *(s.get(k) for k in keys),
                              sum(s.get(x, 0) for x in EXCLUDED)])
    return join(["<h3>Scores per harness</h3>",
                 table(["harness", "tasks", "n", *keys, *EXCLUDED, "tasks short of k"], overall_rows, cls="scores"),
                 note("Mean over tasks of each task's estimate; n counts final tries that say something about "
                      "the policy (infra errors, cancelled and verifier errors are left out and counted apart)."),
                 "<h3>Scores per task</h3>",
                 table(["harness", "task", "n", "successes", *keys, "left out"], task_rows, cls="scores",
                       numeric=range(2, len(keys) + 5))])


def behaviour_table(evaluation: dict[str, Any]) -> Html:
    behaviour = evaluation.get("behaviour") or {}
    if not behaviour:
        return Html("")
    definitions = {**DEFINITIONS, **(evaluation.get("behaviour_definitions") or {}),
                   "rollouts": "Final tries analysed."}
    names = list(behaviour)
    rows: list[list[Any]] = [[metric, *(behaviour[n].get(metric) for n in names),
                              Html(f'<span class="definition">{h(definitions.get(metric, ""))}</span>')]
                             for metric in BEHAVIOUR_ROWS]
    rows.append(["tools used", *(", ".join(f"{t} ×{c}" for t, c in (behaviour[n].get("by_tool") or {}).items())
                                 or "-" for n in names), ""])
    return join(["<h3>Behaviour per harness</h3>",
                 table(["metric", *names, "definition"], rows, cls="behaviour", numeric=range(1, len(names) + 1)),
                 note("Means over the rollouts where a metric is defined ('-': defined for none); "
                      "errors and recovered are totals.")])


def cost_table(evaluation: dict[str, Any]) -> Html:
    cost = evaluation.get("cost") or {}
    if not cost:
        return Html("")
    names = list(cost)

    def seconds(name: str, phase: str) -> str:
        entry = cost[name]
        return f"{entry['seconds'].get(phase, 0.0):.1f} s ({pct(entry['share'].get(phase))})"

    rows: list[list[Any]] = [[phase, *(seconds(n, phase) for n in names)] for phase in PHASES]
    rows += [["total", *(f"{cost[n]['seconds'].get('total', 0.0):.1f} s" for n in names)],
             ["per rollout", *(fmt(cost[n].get("per_rollout_s"), 2) + " s" for n in names)],
             ["rollouts (every try)", *(cost[n]["rollouts"] for n in names)],
             ["retries", *(cost[n]["retries"] for n in names)],
             ["model calls", *(cost[n].get("calls", 0) for n in names)],
             *([key.replace("_", " "), *(cost[n]["tokens"].get(key, 0) for n in names)]
               for key in ("tokens_in", "tokens_out", "tokens_reused"))]
    return join(["<h3>Cost per harness</h3>", table(["", *names], rows, cls="cost"),
                 note("Seconds summed over every try, and each phase's share of the total wall time. "
                      "agent: the harness's own time less its model calls; model: the engine generating.")])


def run_plots(run: RunReport) -> list[Html]:
    evaluation, figures = run.evaluation, []
    rewards: dict[str, list[float]] = {}
    for result in final_tries(run.data.results):
        if result["status"] not in EXCLUDED:
            rewards.setdefault(result.get("harness", ""), []).append(float(result.get("reward") or 0.0))
    if rewards:
        figures.append(("Reward distribution per harness", plots.reward_distribution(dict(sorted(rewards.items())))))
    curves = {name: pass_curve(entry["tasks"]) for name, entry in evaluation["harnesses"].items()}
    if any(curves.values()):
        figures.append(("pass@k for k = 1..n", plots.pass_at_k_curves({n: c for n, c in curves.items() if c})))
    if evaluation.get("behaviour"):
        figures.append(("Behaviour per harness", plots.behaviour_bars(evaluation["behaviour"])))
    if evaluation.get("cost"):
        figures.append(("Time per rollout by phase", plots.cost_bars(evaluation["cost"], PHASES)))
    return [Html(f"<figure>{png(data, caption)}<figcaption>{h(caption)}</figcaption></figure>")
            for caption, data in figures]


def pass_curve(tasks: dict[str, dict[str, Any]]) -> list[tuple[int, float]]:
    """(k, mean over tasks with n >= k of the unbiased pass@k) for k = 1 .. the largest n."""
    counted = [(s["n"], s.get("successes", 0)) for s in tasks.values() if s.get("n")]
    points = []
    for k in range(1, max((n for n, _ in counted), default=0) + 1):
        value = mean(pass_at_k(n, c, k) for n, c in counted)
        if value is not None:
            points.append((k, value))
    return points


def comparisons(runs: list[RunReport]) -> Html:
    if len(runs) < 2:
        return Html("")
    base = runs[0]
    parts = ['<section id="comparisons"><h2>Comparisons</h2>',
             note(f"Each run against {base.label}, paired by task (by harness and task when a run has several "
                  "harnesses); Δ = later run − first run.")]
    for other in runs[1:]:
        parts.append(comparison(compare(base.data.results, other.data.results, name_a=base.label,
                                        name_b=other.label)))
    parts.append("</section>")
    return join(parts)


def comparison(result: dict[str, Any]) -> Html:
    a, b = result["a"], result["b"]
    rows = [[p["harness"], p["task"], p["a"]["n"], p["b"]["n"], p["a"]["pass@1"], p["b"]["pass@1"],
             f"{p['delta_pass@1']:+.3f}", p["a"]["mean_reward"], p["b"]["mean_reward"], f"{p['delta_reward']:+.3f}"]
            for p in result["pairs"]]
    sign, perm = result["sign_test"], result["permutation_test"]
    summary = [("paired by", result["paired_by"]), ("pairs", len(result["pairs"])),
               ("mean Δ pass@1", fmt(result["mean_delta_pass@1"])),
               ("mean Δ reward", fmt(result["mean_delta_reward"])),
               ("sign test", f"{sign['better']} better, {sign['worse']} worse, {sign['ties']} ties; "
                             f"p = {fmt(sign['p'], 4)}"),
               ("permutation test", f"p = {fmt(perm['p'], 4)} ({perm['method']})")]
    summary += [(f"only in {a}", _pairs_text(result["only_a"]))] if result["only_a"] else []
    summary += [(f"only in {b}", _pairs_text(result["only_b"]))] if result["only_b"] else []
    parts = [f"<h3>{h(b)} vs {h(a)}</h3><dl class=facts>", *(f"<dt>{h(k)}</dt><dd>{h(v)}</dd>" for k, v in summary),
             "</dl>"]
    if not result["pairs"]:
        return join([*parts, note("No task was counted in both runs (under the same harness when either ran "
                                  "several): nothing to compare.", "warn")])
    parts += [table(["harness", "task", f"n {a}", f"n {b}", f"pass@1 {a}", f"pass@1 {b}", "Δ pass@1",
                             f"reward {a}", f"reward {b}", "Δ reward"], rows, cls="compare", numeric=range(2, 10))]
    try:
        parts.append(png(plots.delta_plot(result["pairs"], a, b), f"{b} minus {a} per task"))
    except ForgeError as exc:
        parts.append(note(f"No delta plot: {exc}"))
    return join(parts)


def _pairs_text(keys: list[list[str]]) -> str:
    return ", ".join(task if harness == "*" else f"{harness}/{task}" for harness, task in keys)


def rollouts(runs: list[RunReport], decoder_for: DecoderFor) -> Html:
    entries = [(run, result) for run in runs for result in
               sorted(run.data.results, key=lambda r: (r.get("harness", ""), r["task"], r.get("attempt", 0),
                                                       r.get("try_index", 0)))]
    anchors = _anchors(entries)
    with_viewer = anchors[:MAX_VIEWERS]
    rows = []
    for (run, result), anchor in zip(entries, anchors, strict=True):
        usage = result.get("model_usage") or {}
        status = result.get("status", "")
        rows.append([*([run.label] if len(runs) > 1 else []), result["task"], result.get("harness", ""),
                     result.get("attempt", 0), result.get("try_index", 0),
                     Html(f'<span class="status-{h(status)}">{h(status)}</span>'), result.get("reward"),
                     int(usage.get("calls", 0)) - int(usage.get("engine_errors", 0)),
                     fmt((result.get("timings") or {}).get("total_s"), 1),
                     link(f"#{anchor}", "view") if anchor in with_viewer else "-"])
    headers = [*(["run"] if len(runs) > 1 else []), "task", "harness", "attempt", "try", "status", "reward", "turns",
               "seconds", "viewer"]
    parts = ['<section id="rollouts"><h2>Rollouts</h2>',
             Html('<input id="filter" type="search" placeholder="filter rollouts (task, harness, status...)">'),
             table(headers, rows, table_id="rollout-list", numeric={len(headers) - i for i in (2, 3, 4, 6, 7)})]
    if len(entries) > MAX_VIEWERS:
        parts.append(note(f"{len(entries) - MAX_VIEWERS} rollouts have no viewer page: the report keeps "
                          f"{MAX_VIEWERS} (in the order listed) to bound its size.", "warn"))
    parts.append("</section></div>")  # closes the overview
    parts += viewers(entries[:MAX_VIEWERS], with_viewer, decoder_for)
    return join(parts)


def _anchors(entries: list[tuple[RunReport, dict[str, Any]]]) -> list[str]:
    """``rollout/<id>``, made unique (the same run given twice)."""
    seen: Counter[str] = Counter()
    anchors = []
    for _, result in entries:
        base = f"rollout/{result.get('rollout_id', '')}"
        seen[base] += 1
        anchors.append(base if seen[base] == 1 else f"{base}~{seen[base]}")
    return anchors


def viewers(entries: list[tuple[RunReport, dict[str, Any]]], anchors: list[str], decoder_for: DecoderFor) -> list[Html]:
    decoders: dict[str, tuple[TokenText | None, str]] = {}
    pages = []
    for i, ((run, result), anchor) in enumerate(zip(entries, anchors, strict=True)):
        trajectory = run.data.trajectory(result)
        model = str((trajectory or {}).get("metadata", {}).get("model") or run.model)
        if trajectory is not None and model not in decoders:
            decoders[model] = _decoder(model, decoder_for)
        tokens, why = decoders.get(model, (None, ""))
        rollout_run = run.data.run_of(result)
        logs = rollout_run.path / "logs" / str(result.get("rollout_id")) if rollout_run else None
        neighbours = (anchors[i - 1] if i else None, anchors[i + 1] if i + 1 < len(anchors) else None)
        notes = [] if trajectory is not None or not result.get("trajectory") else \
            [f"Its trajectory ({result['trajectory']}) could not be read."]
        page = RolloutPage(anchor, result, trajectory, logs, run.label, neighbours, notes)
        try:
            pages.append(viewer(page, tokens, why))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # a trajectory not as written
            page.trajectory, page.notes = None, [*notes, f"Its trajectory could not be shown: {type(exc).__name__}: "
                                                         f"{exc}"]
            pages.append(viewer(page, None))
    return pages


def _decoder(model: str, decoder_for: DecoderFor) -> tuple[TokenText | None, str]:
    if not model:
        return None, "the run does not name its model"
    try:
        return TokenText(decoder_for(model)), ""
    except (ForgeError, ImportError, OSError, ValueError) as exc:
        log.warning("no tokenizer for %s: %s", model, exc)
        return None, f"{model}: {exc}"
