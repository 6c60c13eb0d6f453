"""`radiance probe` and `radiance exporter`: the probe CLI (the probes themselves live in
radiance.probe), the Prometheus exporter, the watchdog and the Grafana dashboard (docs/observability.md)."""
