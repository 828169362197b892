"""``forge build-env``: task directories -> checked, built, validated, repaired, published environments.

``build`` (the pipeline), ``checks`` (static checks), ``baselines`` (nop/oracle runs), ``repair``
(the LLM repairer), ``publish`` (push + pin), ``render`` (templated environments), ``harbor``
(import/export), ``clawbench`` + ``clawbench_format`` (PinchBench / QwenClawBench import).
The local stack it builds on lives in ``openforgerl.stack``.
"""
