"""Scenarios, runners and hooks of the zonal feature (registered on import)."""
