"""Interactive sessions: a run of kind session (its config's ``session`` part) whose job is
JupyterLab (worker/session_job.py), started through the runs' own path and reached only through
this package's proxy."""
