"""`radiance setup` (placeholder replaced below)."""
