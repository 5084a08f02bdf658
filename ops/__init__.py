"""The domain of carla-console: no Textual import here (tests/test_imports.py checks it)."""
