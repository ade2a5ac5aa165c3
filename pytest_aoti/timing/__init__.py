"""How fast the engine runs next to eager: call times and a profiler trace."""
