"""Compiling and caching: export, decompose, AOT-compile and load a program; its content key, the on-disk store and the registry that compiles each program once."""
