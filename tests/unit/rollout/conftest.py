"""Fixtures of the rollout unit tests."""

from __future__ import annotations

import pytest

from openforgerl.rollout.proxy.template import HFChatTemplate
from openforgerl.testing.proxy import policy_template


@pytest.fixture(scope="module")
def policy() -> HFChatTemplate:
    """The policy's own template (a module may define its own ``policy``). Module-scoped: loaded before each
    test's own forge home is set."""
    template = policy_template()
    assert isinstance(template, HFChatTemplate)
    return template
