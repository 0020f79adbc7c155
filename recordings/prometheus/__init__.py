"""Prometheus metrics of the telemetry events, and the small HTTP server that serves them.

- ``families.py``: the table of metric families (names, kinds, labels, help), read by the
  exposition, ``docs/metrics.md`` and the Grafana dashboard's test;
- ``fold.py``: :class:`~provetop.recordings.prometheus.fold.MetricsFold`, the state reducer plus the
  counts only Prometheus keeps (per label, histograms);
- ``exposition.py``: a reading of the fold as metric families and text;
- ``http_server.py``: ``GET /metrics`` that a bad client cannot turn against its producer.

Here, in the telemetry-format layer, so that the engine and the cuzk watcher both serve them.
"""
