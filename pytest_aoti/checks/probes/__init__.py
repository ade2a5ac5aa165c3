"""Deployment probes: the raw engine called with variants of the example.

:mod:`.variants` chooses the variants, :mod:`.runner` keeps one long-lived :mod:`.child`
process per test process that calls the engines, :mod:`.check` is the check and its report.
"""
