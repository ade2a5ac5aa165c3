"""The torch boundary: export, decompose, AOT-compile and load a program; explain torch's errors, read its guards and op classes, read an engine's buffers back, resolve the host's compile target."""
