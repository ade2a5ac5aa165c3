"""Everything a user reads about a run, made from records.

The data: one record per check and per compile (:mod:`.records`), the recorder a test's
tester reports to (:mod:`.events`), everything a session's reports are made of
(:mod:`.collector`) and the one payload an xdist worker sends (:mod:`.xdist`), where a
test's bundles and traces go (:mod:`.artifacts`). The views: the header (:mod:`.header`),
compile progress (:mod:`.progress`), the terminal summary with the features' sections
(:mod:`.terminal`), the remote store's lines and totals (:mod:`.fleet`), the JSON report
(:mod:`.json_report`), JUnit properties (:mod:`.junit`) and shards' reports merged
(:mod:`.merge`). A feature's own section is in its folder (the deployment hazards in
:mod:`pytest_aoti.probes.hazards`).
"""
