"""Decode loops: a chain of calls fed by their own outputs, eager's and the engine's."""
