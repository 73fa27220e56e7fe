"""The Fleet page and API: GPU-hours, utilisation and idle time per user (docs/fleet.md)."""
