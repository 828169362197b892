"""The standalone verifier runner: these modules are copied into a task's tests/ and run there.

Stdlib only (except forge_dom, which needs playwright) and never imported by openforgerl itself.
"""
