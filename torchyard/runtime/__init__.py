"""In-job helpers: seeding, data loaders, metric reporting, checkpoints and the context.

Imports only the standard library, numpy and torch: this runs inside every training
process, which must not pay for (or be able to break on) the server's dependencies.
"""

from torchyard.runtime.checkpoint import load_checkpoint, save_checkpoint, unwrap_model
from torchyard.runtime.context import JobContext, get_context
from torchyard.runtime.data import epoch_seed, make_loader, seed_worker, set_epoch
from torchyard.runtime.reporter import Reporter, ReporterError
from torchyard.runtime.seeding import seed_everything

__all__ = [
    "JobContext",
    "Reporter",
    "ReporterError",
    "epoch_seed",
    "get_context",
    "load_checkpoint",
    "make_loader",
    "save_checkpoint",
    "seed_everything",
    "seed_worker",
    "set_epoch",
    "unwrap_model",
]
