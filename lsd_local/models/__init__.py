"""Model files: the registry (registry.py, models.toml), Hub names and downloads
(hubnames.py, hub.py), what MODEL means (resolve.py), the embedded demo model (embedded.py),
shipped data (resources.py) and loading an engine's models (loading.py)."""
