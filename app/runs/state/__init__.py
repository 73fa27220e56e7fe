"""A run's states and how it moves between them: the lifecycle (every status change), dispatch of
its broker message, recovery and the reaper, attempts, phases and notices."""
