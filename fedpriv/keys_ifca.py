"""Run-config keys of the ifca feature (registered on import)."""
