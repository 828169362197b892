"""Which CPUs `forge serve` has vLLM's CPU worker compute on (VllmConfig.cpu_threads_bind)."""

from __future__ import annotations

import os

import pytest

from openforgerl.serving import vllm


def test_a_small_machine_binds_every_cpu_a_big_one_keeps_vllm_s_choice():
    assert vllm.small_machine_bind({0, 1}) == "0,1"
    assert vllm.small_machine_bind({3, 5, 4}) == "3,4,5"  # the CPUs this process may use, not 0..n-1
    assert vllm.small_machine_bind(set(range(16))) is None


def test_the_config_wins_then_the_environment_then_the_small_machine_default(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(vllm.BIND_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert vllm.server_env(vllm.VllmConfig(), "cpu")[vllm.BIND_ENV] == "0,1"
    assert vllm.server_env(vllm.VllmConfig(cpu_threads_bind="auto"), "cpu")[vllm.BIND_ENV] == "auto"
    assert vllm.BIND_ENV not in vllm.server_env(vllm.VllmConfig(), "gpu")
    monkeypatch.setenv(vllm.BIND_ENV, "1")
    assert vllm.server_env(vllm.VllmConfig(), "cpu")[vllm.BIND_ENV] == "1"
    assert vllm.server_env(vllm.VllmConfig(cpu_threads_bind="0-1"), "cpu")[vllm.BIND_ENV] == "0-1"
    monkeypatch.delenv(vllm.BIND_ENV)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)))
    assert vllm.BIND_ENV not in vllm.server_env(vllm.VllmConfig(), "cpu")  # vLLM's auto
