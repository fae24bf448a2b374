"""Scenarios, runners and hooks of the ifca feature (registered on import)."""
