"""Package data, not code: the model catalog (catalog.toml, see README.md), installed as
edgespec.models so that edgespec.modelstore.catalog finds it with importlib.resources."""
