"""The sweep's Hydra configuration, loaded as the package ``sweep.conf`` (``pkg://sweep.conf``).

Hydra requires this file to use a package as its primary configuration; ``src/sweep/conf`` is a
symbolic link here, and a wheel carries a copy (see ``pyproject.toml``).
"""
