"""Golden records: what a passing check's engine answered, kept to be checked on the next torch."""
