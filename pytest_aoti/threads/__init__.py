"""One engine serving several threads at once, against sequential eager runs."""
