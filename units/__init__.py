"""systemd unit and Quadlet templates rendered per stack."""
