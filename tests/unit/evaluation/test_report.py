"""forge report: one HTML file that shows the scores, comparisons and every trajectory, loads
nothing from the network, and lets no text from a run (model output, tool results, logs) become markup."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from openforgerl.cli import main
from openforgerl.errors import UserError
from openforgerl.evaluation import report as report_module
from openforgerl.evaluation.compare import compare
from openforgerl.evaluation.report import write_report, write_report_and_summary
from openforgerl.rollout.harness import AgentContext, Harness, Invocation
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.chat import CharTemplate
from openforgerl.testing.proxy import InProcessProxy
from openforgerl.testing.runtime import FakeRuntime, Scenario, exits, writes
from openforgerl.testing.tasks import write_task

HOSTILE = '</textarea><script>alert(1)</script>"onerror=alert(2) <img src=x onerror=alert(3)> </pre>'
MARKUP = {"html", "head", "meta", "title", "style", "noscript", "body", "script", "div", "nav", "section", "article",
          "h1", "h2", "h3", "h4", "h5", "p", "a", "dl", "dt", "dd", "ul", "li", "table", "thead", "tbody", "tr", "th",
          "td", "figure", "figcaption", "img", "pre", "span", "i", "input"}
"""Every element the report itself writes."""
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("shell", "write_file")]


class Page(HTMLParser):
    """Every start tag with its attributes, the text of each table by id/class, and the page's text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.text: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        named = dict(attrs)
        if tag == "table":
            self._table = named.get("id") or named.get("class") or ""
            self.tables.setdefault(self._table, [])
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def rows(self, name: str) -> list[list[str]]:
        return self.tables[name][1:]


def write_run(root: Path, results: list[dict[str, Any]], model: str = "test-model") -> Path:
    """A rollout run directory written by hand: rollouts.jsonl and config.yaml."""
    root.mkdir(parents=True)
    (root / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    (root / "config.yaml").write_text(f"model: {model}\ntasks: []\n")
    return root


def line(task: str, attempt: int, success: bool, harness: str = "react", **extra: Any) -> dict[str, Any]:
    return {"rollout_id": f"r-{harness}-{task}-{attempt}", "task": task, "attempt": attempt, "harness": harness,
            "status": "success" if success else "failure", "reward": 1.0 if success else 0.0, "try_index": 0,
            "timings": {"container_start_s": 0.5, "harness_s": 2.0, "verifier_s": 0.3, "total_s": 3.0},
            "model_usage": {}, "metrics": {}, "harness_exit_code": 0, "trajectory": None, **extra}


def outcomes(run: Path, wins: dict[str, list[bool]]) -> list[dict[str, Any]]:
    results = [line(task, i, ok) for task, oks in wins.items() for i, ok in enumerate(oks)]
    write_run(run, results)
    return results


class ModelAgent(Harness):
    """Whatever the fake sandbox's scenario does, as a harness that calls the model (so it has a trajectory)."""

    name = "agent"
    uses_model = True

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["agent"], env={"OPENAI_API_KEY": ctx.api_key})


def hostile_rollout(tmp_path: Path) -> Path:
    """A real run (fake sandbox, the real in-process proxy) whose model, tools and logs all say HOSTILE."""
    write = {"name": "write_file", "arguments": {"path": "/app/x", "content": HOSTILE}}
    proxy = InProcessProxy([ScriptTurn(text=HOSTILE, tool_calls=[write]), ScriptTurn(text="done " + HOSTILE)])

    async def agent(box, command, timeout):
        auth = {"authorization": f"Bearer {box.execs[-1][2]['OPENAI_API_KEY']}"}
        messages: list[dict[str, Any]] = [{"role": "user", "content": "write x " + HOSTILE}]
        async with proxy.client() as client:
            first = (await client.post("/v1/chat/completions", headers=auth,
                                       json={"model": "m", "messages": messages, "tools": TOOLS})).json()
            answer = first["choices"][0]["message"]
            messages += [answer, {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"], "content": HOSTILE}]
            await client.post("/v1/chat/completions", headers=auth,
                              json={"model": "m", "messages": messages, "tools": TOOLS})
        return await exits(0, stderr="agent says " + HOSTILE)(box, command, timeout)

    verifier = writes("/logs/verifier/reward.json", json.dumps({"reward": 1, "note": HOSTILE}),
                      then=exits(0, stdout="verifier says " + HOSTILE))
    task = write_task(tmp_path / "tasks", "hello")
    config = RolloutConfig(tasks=[str(task)], harness="nop", model="test-model", run_dir=str(tmp_path / "run"))
    runtime = FakeRuntime(Scenario(agent=agent, verifier=verifier))
    run_dir, _ = asyncio.run(run_rollouts(config, harness=ModelAgent(), runtime=runtime, proxy=proxy.handle()))
    return run_dir


def test_scores_per_harness_and_per_task_are_in_the_tables(tmp_path: Path):
    run = tmp_path / "run"
    outcomes(run, {"t1": [True, False, True], "t2": [False, False, False]})
    page = Page(write_report([run]).read_text())
    assert (run / "report.html").is_file()
    # pass@1, pass@3, pass^3, mean reward: the mean over tasks of each task's
    assert page.rows("scores")[0][:7] == ["react", "2", "6", "0.333", "0.500", "0.000", "0.333"]
    per_task = {row[1]: row for row in page.tables["scores"][3:]}  # the per-task table follows
    assert per_task["t1"][2:7] == ["3", "2", "0.667", "1.000", "0.000"]
    assert per_task["t2"][2:5] == ["3", "0", "0.000"]
    assert [row[0] for row in page.rows("rollout-list")] == ["t1"] * 3 + ["t2"] * 3


def test_eval_json_is_shown_as_it_is_unless_other_ks_are_asked_for(tmp_path: Path):
    run = tmp_path / "eval"
    outcomes(run / "react", {"t1": [True, False, True, True]})
    from openforgerl.evaluation.runner import score_dir

    score_dir(run, [1, 2])
    text = write_report([run]).read_text()
    assert "pass@2" in text and "pass@4" not in text
    text = write_report([run], ks=[1, 4]).read_text()
    assert "pass@4" in text and "pass@2" not in text


def test_the_report_embeds_plots_and_loads_nothing_from_the_network(tmp_path: Path):
    run = tmp_path / "run"
    outcomes(run, {"t1": [True, False], "t2": [False, True]})
    page = Page(write_report([run]).read_text())
    images = [attrs["src"] or "" for tag, attrs in page.tags if tag == "img"]
    assert len(images) == 4  # rewards, pass@k, behaviour, cost
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert_offline(page)


def assert_offline(page: Page) -> None:
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), f"<{tag} {name}=...>: an event handler"
            if name in ("src", "href", "action", "poster", "data"):
                assert (value or "").startswith(("#", "data:image/png;base64,")), f"<{tag} {name}={value}>"
    assert [tag for tag, _ in page.tags].count("script") == 1  # the report's own, allowed by its hash
    assert {tag for tag, _ in page.tags} <= MARKUP


def test_model_text_tool_results_and_logs_cannot_inject_markup(tmp_path: Path):
    run = hostile_rollout(tmp_path)
    text = write_report([run], decoder_for=lambda model: CharTemplate()).read_text()
    page = Page(text)
    assert_offline(page)
    assert "alert(" not in "".join(str(attrs) for _, attrs in page.tags)
    shown = "".join(page.text)
    # all of it is on the page, as text: in the tokens, the digest, the verifier's and the agent's output
    assert shown.count("<script>alert(1)</script>") >= 6
    assert "verifier says " + HOSTILE in shown and "agent says " + HOSTILE in shown


def test_each_rollout_has_a_viewer_with_calls_segments_tokens_and_the_verdict(tmp_path: Path):
    run = hostile_rollout(tmp_path)
    [result] = [json.loads(row) for row in (run / "rollouts.jsonl").read_text().splitlines()]
    page = Page(write_report([run], decoder_for=lambda model: CharTemplate()).read_text())
    viewers = [attrs for tag, attrs in page.tags if tag == "section" and attrs.get("class") == "viewer"]
    assert [v["id"] for v in viewers] == [f"rollout/{result['rollout_id']}"]
    assert ("a", {"href": f"#rollout/{result['rollout_id']}"}) in page.tags  # linked from the list
    shown = "".join(page.text)
    assert "Call 0" in shown and "Call 1" in shown and "starts segment 0: the rollout's first call" in shown
    assert "extends segment 0" in shown and "Tool result (write_file)" in shown and "Tool call: write_file" in shown
    policy = [attrs for tag, attrs in page.tags if tag == "i" and "title" in attrs]
    assert policy and all(float(a["title"].split(",")[0]) <= 0 for a in policy)  # logprobs on hover
    assert any(tag == "span" and attrs.get("class") == "c" for tag, attrs in page.tags)  # tokens not sampled
    assert "verifier stdout" in shown and "agent stderr" in shown and "Metrics" in shown


def test_a_viewer_renders_a_bounded_number_of_tokens_and_says_what_it_left_out(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    from openforgerl.evaluation import report_viewer

    run = hostile_rollout(tmp_path)
    trajectory = json.loads(next((run / "trajectories").iterdir()).read_text())
    [segment] = trajectory["segments"]
    monkeypatch.setattr(report_viewer, "PROMPT_TOKENS", 10)
    monkeypatch.setattr(report_viewer, "RESPONSE_TOKENS", 30)
    page = Page(write_report([run], decoder_for=lambda model: CharTemplate()).read_text())
    shown = "".join(page.text)
    assert f"Prompt ({len(segment['prompt_ids'])} tokens; the first {len(segment['prompt_ids']) - 10} not shown)" \
        in shown
    left_out = [int(n) for n in re.findall(r"… (\d+) more tokens not shown", shown)]
    assert len(left_out) == 2 and sum(left_out) == len(segment["response_ids"]) - 30  # call 0's rest, all of call 1
    assert sum(1 for tag, attrs in page.tags if tag == "i" and "title" in attrs) <= 30


def test_a_trajectory_that_is_not_as_written_costs_its_viewer_only(tmp_path: Path):
    run = hostile_rollout(tmp_path)
    path = next((run / "trajectories").iterdir())
    trajectory = json.loads(path.read_text())
    trajectory["segments"][0]["response_mask"] = trajectory["segments"][0]["response_mask"][:5]  # cut short
    path.write_text(json.dumps(trajectory))
    shown = "".join(Page(write_report([run], decoder_for=lambda model: CharTemplate()).read_text()).text)
    assert "Its trajectory could not be shown: IndexError" in shown and "verifier says" in shown


def test_without_the_tokenizer_the_viewer_says_so_and_shows_the_digest(tmp_path: Path):
    run = hostile_rollout(tmp_path)

    def no_tokenizer(model: str):
        raise UserError(f"model {model!r} is not pulled", fix="forge model pull")

    shown = "".join(Page(write_report([run], decoder_for=no_tokenizer).read_text()).text)
    assert "Token colouring needs the policy's tokenizer (test-model: model 'test-model' is not pulled" in shown
    assert "Tool result (write_file)" in shown and "Prompt (" not in shown


def test_two_runs_are_compared_task_by_task_with_the_tests_p_values(tmp_path: Path):
    a = outcomes(tmp_path / "a", {f"t{i}": [False, False] for i in range(6)})
    b = outcomes(tmp_path / "b", {f"t{i}": [i < 5, True] for i in range(6)})
    page = Page(write_report([tmp_path / "a", tmp_path / "b"], tmp_path / "out" / "r.html").read_text())
    expected = compare(a, b, name_a="a", name_b="b")
    shown = "".join(page.text)
    assert f"p = {expected['sign_test']['p']:.4f}" in shown
    assert f"p = {expected['permutation_test']['p']:.4f} (exact)" in shown
    rows = {row[1]: row for row in page.rows("compare")}
    assert rows["t0"][4:7] == ["0.000", "1.000", "+1.000"] and rows["t5"][6] == "+0.500"
    assert sum(1 for tag, attrs in page.tags if tag == "img") == 4 * 2 + 1  # each run's plots and the deltas


def test_viewers_are_capped_and_the_rest_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    run = tmp_path / "run"
    outcomes(run, {"t1": [True, False, True]})
    monkeypatch.setattr(report_module, "MAX_VIEWERS", 2)
    page = Page(write_report([run]).read_text())
    assert sum(1 for tag, attrs in page.tags if tag == "section" and attrs.get("class") == "viewer") == 2
    assert "1 rollouts have no viewer page" in "".join(page.text)


def test_without_matplotlib_the_report_has_no_plots_and_says_how_to_get_them(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    run = tmp_path / "run"
    outcomes(run, {"t1": [True, False]})
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as when it is not installed
    page = Page(write_report([run]).read_text())
    assert not any(tag == "img" for tag, _ in page.tags)
    assert 'pip install "openforgerl[report]"' in "".join(page.text)


def test_the_terminal_summary_puts_each_run_side_by_side_with_the_change_per_harness_and_task(tmp_path: Path):
    before, after = tmp_path / "eval-before", tmp_path / "eval-after"
    write_run(before, [line("memo", i, ok) for i, ok in enumerate([False, False])]
              + [line("agenda", i, ok) for i, ok in enumerate([True, False])]
              + [line("memo", 0, True, harness="oracle"), line("agenda", 0, True, harness="oracle")])
    write_run(after, [line("memo", i, ok) for i, ok in enumerate([True, True])]
              + [line("agenda", i, ok) for i, ok in enumerate([True, False])]
              + [line("memo", 0, True, harness="oracle")])  # agenda's oracle rollout did not run
    _, text = write_report_and_summary([before, after], tmp_path / "r.html")
    rows = [line.split() for line in text.splitlines()]
    assert rows[0] == ["harness", "/", "task", "eval-before", "eval-after", "change"]
    assert rows[2:7] == [["oracle", "1.00", "(2/2)", "1.00", "(1/1)", "+0.00"],
                         ["agenda", "1.00", "(1/1)", "-", "-"],
                         ["memo", "1.00", "(1/1)", "1.00", "(1/1)", "+0.00"],
                         ["react", "0.25", "(1/4)", "0.75", "(3/4)", "+0.50"],
                         ["agenda", "0.50", "(1/2)", "0.50", "(1/2)", "+0.00"]]
    assert rows[7] == ["memo", "0.00", "(0/2)", "1.00", "(2/2)", "+1.00"]


def test_the_cli_prints_the_report_path_and_names_a_bad_directory_in_one_line(tmp_path: Path, capsys):
    run = tmp_path / "run"
    outcomes(run, {"t1": [True]})
    main(["report", str(run), "--out", str(tmp_path / "r.html"), "-k", "1"])
    printed = capsys.readouterr()
    assert printed.out.strip() == str(tmp_path / "r.html")
    table = [line.split() for line in printed.err.splitlines()]
    assert table[0] == ["harness", "/", "task", "run"] and table[2] == ["react", "1.00", "(1/1)"]  # the pass@1
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as stopped:
        main(["report", str(tmp_path / "empty")])
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 1 and len(err.splitlines()) == 1
    assert err.startswith(f"UserError: {tmp_path / 'empty'} holds no rollouts.jsonl") and "fix:" in err
