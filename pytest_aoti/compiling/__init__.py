"""The torch boundary: export, compile and load a program, explain torch's errors, read guards,
op classes and engine buffers."""
