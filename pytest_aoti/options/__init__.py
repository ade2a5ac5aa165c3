"""The options: their values and parsers (``values``), the rows (``table``), the typed
per-check options (``check_options``), a test's layered defaults (``defaults``), a run's
settings (``settings``) and the one resolver (``resolve``)."""
