"""Swapped weights: the engine with new weights loaded through ``load_constants``, compared
with eager holding the same weights."""
