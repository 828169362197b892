"""Rendering environment/Dockerfile from the claw / code templates."""

from __future__ import annotations

import pytest

from openforgerl.envs.render import RENDERED_MARK, known_templates, render_environment
from openforgerl.errors import UnknownNameError

CLAW = '[task]\nname = "mail"\ndomain = "claw"\n[environment]\ntemplate = "claw"\n' \
       '[environment.template_params]\nservices = ["mail", "calendar"]\npackages = ["sqlite3"]\n'


def test_claw_and_code_templates_are_known():
    assert {"claw", "code"} <= set(known_templates())


def test_claw_template_renders_services_packages_and_files(make_task):
    task_dir = make_task("mail", CLAW, dockerfile=None)
    (task_dir / "environment" / "files").mkdir()
    assert render_environment(task_dir) is True
    dockerfile = (task_dir / "environment" / "Dockerfile").read_text()
    assert dockerfile.startswith(RENDERED_MARK) and "FROM openforgerl/base:bookworm" in dockerfile
    assert 'ENV FORGE_SERVICES="mail calendar"' in dockerfile and "sqlite3" in dockerfile
    assert "COPY --chown=agent:agent files/ /app/" in dockerfile
    assert (task_dir / "environment" / "forge_services.py").is_file()
    assert render_environment(task_dir) is False  # same bytes: nothing rewritten


def test_code_template_installs_pytest_and_copies_the_repo(make_task):
    toml = '[environment]\ntemplate = "code"\n[environment.template_params]\npackages = ["make"]\n'
    task_dir = make_task("fix", toml, dockerfile=None)
    render_environment(task_dir)
    dockerfile = (task_dir / "environment" / "Dockerfile").read_text()
    assert "python3-pytest make" in dockerfile and "COPY --chown=agent:agent repo/ /app/" in dockerfile


def test_a_hand_written_dockerfile_is_never_overwritten(make_task):
    task_dir = make_task("mail", CLAW)
    before = (task_dir / "environment" / "Dockerfile").read_text()
    assert render_environment(task_dir) is False
    assert (task_dir / "environment" / "Dockerfile").read_text() == before


def test_unknown_template_lists_the_known_ones(make_task):
    task_dir = make_task("x", '[environment]\ntemplate = "nosuch"\n', dockerfile=None)
    with pytest.raises(UnknownNameError) as info:
        render_environment(task_dir)
    assert "claw" in str(info.value) and "code" in str(info.value)
