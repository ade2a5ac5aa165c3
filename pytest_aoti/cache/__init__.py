"""The artifact cache: a program's content key, the local checksum-verified store, the seed history and the registry that compiles each program once per run."""
