"""Run-config keys of the zonal feature (registered on import)."""
