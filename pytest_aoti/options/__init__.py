"""The options: their values and parsers (``values``), one option's row (``option``),
options as dataclass fields (``fields``), what a feature declares (``feature``), the rows
(``table``), the core per-check options (``check_options``), a test's layered defaults
(``defaults``), a run's settings (``settings``), the keywords each place of a test accepts
(``keywords``) and the one resolver (``resolve``). The per-check options of every feature
are composed in :mod:`pytest_aoti.features`."""
