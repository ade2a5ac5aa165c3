"""The C++ loader: the same package loaded by ``AOTIModelPackageLoader`` in a process without
Python, as a C++ server loads it, against the Python engine and eager."""
