"""The options: parsers (``parsers``), one option's row (``option``), options as dataclass
fields (``fields``), what a feature declares (``feature``), the run's catalog of the core's
and the feature plugins' rows (``catalog``, ``core_rows``, ``table``), typed per-check options
(``check_options``), layered defaults (``defaults``), settings, keywords and the resolver."""
