"""The domain of carla-console: no Textual import here (tests/unit/test_imports.py checks it)."""
