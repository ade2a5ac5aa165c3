"""Everything a user reads about a run, made from records: the records and collector (the data),
and the header, progress lines, terminal summary, JSON report and JUnit properties (the views)."""
