"""Bundled model and hardware profiles (YAML): :mod:`prefixsim.models`, :mod:`prefixsim.hardware`.

This folder is a package so that Hydra finds it as ``pkg://prefixsim.profiles``: its ``model/``
and ``hardware/`` folders are the sweep's config groups of the same names.
"""
