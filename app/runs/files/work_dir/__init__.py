"""Files a run wrote under its working directory (``<run_dir>/work``: a script's
``model_best.pt``, a Lightning ``.ckpt``, a Hugging Face ``checkpoint-500/``): listed and
served from this disk, or, for an API on another host than the worker, from the copy the
worker left in the artifact store when the run ended.

One idea in four modules that import one way (serve -> store -> local -> archive):
``archive`` builds a tar.gz of a folder's members; ``local`` lists and opens the files on this
disk; ``store`` copies them to the artifact store and lists and reads that copy; ``serve``
answers the API from whichever of the two holds them.

The directory is written by the job, which is someone's code: every path in it is hostile,
and so is the listing the worker stored from it.
"""
