"""Deployment probes: the raw engine called with variants of the example, as deployed
callers will call it (:mod:`.check`, :mod:`.variants`, :mod:`.runner`), and the hazards
they find, in the terminal summary (:mod:`.hazards`, remembered by :mod:`.last_hazards`).

Declared in :mod:`.feature`; its hooks are :mod:`.plugin`. No torch at import time.
"""
