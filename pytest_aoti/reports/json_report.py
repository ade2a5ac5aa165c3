"""The JSON report's format version (``--aoti-report=PATH``, the document of
:meth:`~pytest_aoti.reports.collector.ReportCollector.document`); docs/reports.md lists each
:data:`REPORT_VERSION`'s changes."""

from __future__ import annotations

REPORT_VERSION = 2
"""The report format's version; docs/reports.md lists what each changed and what was added since."""
