"""The package version, stated once: setup.py reads this file, ``w8a8.__version__`` imports it."""
__version__ = "0.2.0"
