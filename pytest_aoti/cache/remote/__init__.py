"""The signed remote store a CI fleet shares: the fsspec store, its fault guard, manifests, signing and redaction of URLs."""
