"""Triage: what explains a failed check (the stage that broke it, the first diverging node, the repro bundle)."""
