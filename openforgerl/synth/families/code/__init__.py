"""The code families: name -> where each is defined (imported only when used).

Bug injection by mutation operators in the manner of SWE-smith (``code.bug.<operator>``, and
``code.bug.combine`` for two bugs at once) and ``code.implement.function``; the tasks are built from
the repositories in ``openforgerl/synth/bundled/code`` (see ``task.py`` for what a code task holds).
"""

TABLE: dict[str, str] = {
    "code.bug.op_change": "openforgerl.synth.families.code.bugs:OpChange",
    "code.bug.op_swap": "openforgerl.synth.families.code.bugs:OpSwap",
    "code.bug.off_by_one": "openforgerl.synth.families.code.bugs:OffByOne",
    "code.bug.swap_args": "openforgerl.synth.families.code.bugs:SwapArgs",
    "code.bug.remove_cond": "openforgerl.synth.families.code.bugs:RemoveCond",
    "code.bug.remove_loop": "openforgerl.synth.families.code.bugs:RemoveLoop",
    "code.bug.remove_assign": "openforgerl.synth.families.code.bugs:RemoveAssign",
    "code.bug.ctrl_invert_if": "openforgerl.synth.families.code.bugs:CtrlInvertIf",
    "code.bug.combine": "openforgerl.synth.families.code.bugs:Combine",
    "code.implement.function": "openforgerl.synth.families.code.implement:ImplementFunction",
}
