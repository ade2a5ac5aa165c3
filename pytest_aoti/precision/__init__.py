"""Precision the engine does not round away: reported, or failing with precision="fail"."""
