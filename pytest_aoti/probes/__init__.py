"""Deployment probes: the raw engine called with variants of the example, as deployed
callers will call it (:mod:`.check`, :mod:`.variants`, :mod:`.runner`), and the hazards
they find, in the terminal summary (:mod:`.hazards`, remembered by :mod:`.last_hazards`).

Declared in :mod:`.feature`; its hooks are :mod:`.plugin`. The plugin and what it loads
at startup (the feature, the hazards' summary) import no torch; :mod:`.check`, with the
variants and the runner, imports torch and loads at a run's first check.
"""
