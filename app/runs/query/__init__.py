"""Finding runs: the listing, its API, the filter language compiled to SQL, and params."""
