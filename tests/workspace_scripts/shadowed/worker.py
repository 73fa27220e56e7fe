OWN = "worker"
