"""The pieces of scripts/probe_bad_input.py (issue 16): hostile inputs by class.

common (outcomes, running commands, the sandboxed environment), models (broken model
files), state (calibration cache, kills mid-write, saved conversations), catalog (bad
catalogs) and http (hostile requests against ``edgespec serve``).
"""
