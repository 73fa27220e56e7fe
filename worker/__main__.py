"""`python -P -m worker ARGS`: Celery's command line on torchyard's app (`torchyard up` and
`torchyard worker` start the worker this way).

Not `python -m celery -A worker.celery_app`: Celery imports the -A module and the task modules
with the current directory first on sys.path, so a `worker.py` or `app/` of the user's own in
the folder where `torchyard up` was started took the place of ours. Here the app and its tasks
are imported before Celery looks (it then finds them loaded), and -P keeps that folder off
sys.path for everything else.
"""

import os
import sys

from app.settings import PRIVATE_UMASK
from worker import tasks  # noqa: F401  (registers the run task before Celery's own import)
from worker.celery_app import celery_app
from worker.runner import announce_isolation

os.umask(PRIVATE_UMASK)
if sys.argv[1:2] == ["worker"]:
    announce_isolation()
sys.exit(celery_app.start(sys.argv[1:]))
