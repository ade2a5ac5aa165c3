"""Checks: each compares eager PyTorch with the engine in one way and returns findings or figures."""
