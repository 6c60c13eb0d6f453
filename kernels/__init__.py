"""See DESIGN.md for what lives here."""
