OWN = "app"
