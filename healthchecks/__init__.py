"""Probes, the Prometheus exporter and the Grafana dashboard (docs/observability.md)."""
