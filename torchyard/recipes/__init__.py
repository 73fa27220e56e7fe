"""Built-in recipes.

Keep this file free of imports: the API server imports ``torchyard.recipes.catalog`` (which
runs this ``__init__``) and must never load torch. The recipe modules themselves are
imported by the job only, by the dotted names in the catalog.
"""
