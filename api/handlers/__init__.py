"""Request handlers, one module per area; each exports a `routes` table."""
