"""The Slurm executor (worker.executor): a pool's runs handed to a Slurm cluster."""
