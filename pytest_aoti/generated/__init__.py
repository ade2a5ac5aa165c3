"""Generated shapes: Hypothesis draws input shapes inside the exported ranges, each
compared with eager on the one engine (:mod:`.check`), failures shrunk; Hypothesis's own
summary is left out where no test of the run used it (:mod:`.idle_hypothesis`).

Declared in :mod:`.feature`; its hooks are :mod:`.plugin`, which loads at startup and
imports no torch; :mod:`.check` imports torch and Hypothesis, and loads at a run's first
check.
"""
