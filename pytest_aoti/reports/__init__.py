"""Everything a user reads about checks: records (:mod:`.records`), what the session's
testers report (:mod:`.events`), the terminal summary (:mod:`.terminal`), the JSON report
(:mod:`.json_report`), JUnit properties (:mod:`.junit`), the header (:mod:`.header`),
compile progress (:mod:`.progress`) and the xdist payload (:mod:`.collector`, :mod:`.xdist`).
"""
