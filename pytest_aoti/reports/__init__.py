"""Reports: check records, the terminal summary, the JSON report, JUnit properties and the xdist merge."""
