"""Code snapshots: a user's own checkout, uploaded once, run by any number of runs."""
