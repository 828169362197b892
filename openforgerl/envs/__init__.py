"""``forge build-env``: task directories -> checked, built, validated, repaired, published environments.

``build`` (the pipeline), ``checks`` (static checks), ``baselines`` (nop/oracle runs), ``repair``
(the LLM repairer), ``publish`` (push + pin), ``render`` (templated environments), ``harbor``
(import/export). The local stack it builds on lives in ``openforgerl.stack``.
"""
