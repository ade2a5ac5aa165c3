"""The CI fleet: a signed remote cache behind the local one, and reports merged across shards."""
