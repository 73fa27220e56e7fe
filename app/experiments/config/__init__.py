"""The run config: one pydantic model from the API to the launcher, every default here.

The recipe catalog (torchyard.recipes.catalog, stdlib only) declares each recipe's params;
``model`` turns it into pydantic models, one per recipe, joined by a discriminated union on
`recipe`, so an error points at the exact field: `config.digits_cnn.params.lr`.

The API validates a config (``validate.validate_config``) and stores its JSON
(``RunConfig.stored``); whoever reads a stored one back (the scheduler, the worker, retention)
gets the typed model from ``model.run_config``, never a dict read with ``.get(key, default)``.
The job's side, which imports no pydantic, gets what it needs as torchyard.contract.RunSpec
(``RunConfig.run_spec``) or as the stored JSON itself.

Two modules that import one way: ``model`` (the pydantic models, no database: the worker and
app.code.service read configs through it) and ``validate`` (a config checked as the API
receives it, a code snapshot it names included: app.code.service, which imports ``model``).
"""
