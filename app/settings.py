"""The one settings class: every knob of server and worker, overridable by TORCHYARD_* env vars."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from functools import lru_cache
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.runs.files.job_files import within
from app.settings_efficiency import EfficiencySettings
from app.settings_fairshare import FairShareSettings
from app.settings_pools import PoolSettings
from app.settings_rules import CGROUP_PARENT, Hours, Seconds, SecondsOrOff, refuse_conflicts
from app.settings_sessions import SessionSettings

PRIVATE_UMASK = 0o077  # every torchyard process's files 0600, folders 0700


class Settings(PoolSettings, EfficiencySettings, FairShareSettings, SessionSettings, BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TORCHYARD_", extra="ignore")

    data_dir: Path = Path("torchyard-data")
    # The port `torchyard up` serves on unless --port names one (`make up PORT=8080`).
    port: int = Field(default=8000, ge=1, le=65535)
    workspace_dir: Path = Path("workspace")
    # Where workers put checkpoints for the API (and other workers) to read: an fsspec URL or a
    # plain path ("/mnt/artifacts", "file:///...", "s3://bucket/prefix" with the s3 extra).
    # Empty: the data dir is shared (one box, or NFS) and nothing is copied (app/artifacts.py).
    artifact_store: str = ""
    # With an artifact store, the files a run wrote in its working directory (a script's
    # model.pt, a Hugging Face checkpoint-500/) are copied there when it ends, up to this many
    # bytes per run (largest left out first is not tried: files go in path order until the
    # cap); the run's log says what was left out (app/runs/files/work_dir/store.py).
    run_files_store_max_bytes: int = Field(default=2 * 1024**3, ge=0)
    # Images a job logs with TensorBoard (add_image, add_figure) are kept in the database, with
    # caps against a runaway or hostile job (app/runs/files/images.py); the run's log says when one
    # is hit: a larger image is not kept; past the count per tag older steps are thinned out
    # (newest kept); past the bytes per run later images are not kept.
    tb_image_max_bytes: int = Field(default=4 * 1024**2, ge=0)
    tb_images_per_tag: int = Field(default=100, ge=1)
    tb_images_max_run_bytes: int = Field(default=128 * 1024**2, ge=0)
    # Empty means "derive from data_dir": SQLite database and SQLite-backed broker (embedded).
    database_url: str = ""
    broker_url: str = ""
    secret_key: str = ""
    admin_password: str = ""
    # Passwords set by API, page or CLI need this many characters (not TORCHYARD_ADMIN_PASSWORD).
    password_min_length: int = Field(default=10, ge=1, le=1000)
    token_ttl_hours: Hours = 24 * 7
    # An invite link (the users page) sets the new user's first password within this time.
    invite_ttl_hours: Hours = 72
    # The longest life a token made through POST /api/tokens (or the account page) may ask
    # for; a token made with a token also never outlives the one that made it.
    token_max_ttl_hours: Hours = 24 * 90
    # API server processes of `torchyard serve` (docker-compose.yml's api) on its one port,
    # beside their warmed spare (torchyard/compose/supervisor.py); `up` runs one.
    api_processes: int = Field(default=1, ge=1, le=64)
    # The highest run priority a non-admin may set (422 above it); admins: up to 1000.
    max_user_priority: int = Field(default=10, ge=-1000, le=1000)
    # Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto are believed (comma-separated
    # addresses or CIDR ranges, e.g. "127.0.0.1" for a proxy on the same box). Empty: none;
    # the client address is the TCP peer's, whatever headers it sends.
    trusted_proxies: str = ""
    # Served over HTTPS (directly or behind a TLS proxy): session and CSRF cookies are then
    # Secure and named with the __Host- prefix (bound to this host, path /, no Domain).
    tls: bool = False
    # Password logins (API and form): after this many failures for one username within the
    # window, or login_max_failures_per_client from one client address, further attempts
    # get 429 until the oldest failure leaves the window. Counted in the database, so every
    # API process shares one allowance.
    # Per username per client (never per username alone: nobody can lock another user out).
    login_max_failures: int = 5
    login_max_failures_per_client: int = 20
    login_window_seconds: Seconds = 15 * 60
    # argon2id's cost for new password hashes (argon2-cffi's defaults, RFC 9106's second
    # recommendation: 3 passes over 64 MiB). A stored hash keeps the cost it was made with and
    # is rehashed at its next login when these change. The test suite sets them low (it hashes
    # ~500 passwords a pass); a deployment has no reason to.
    password_hash_time_cost: int = Field(default=3, ge=1)
    password_hash_memory_kib: int = Field(default=64 * 1024, ge=64)
    # nproc == 1 jobs start the entry point directly with torchrun's environment (saves one
    # torch import, ~2.5 s); "torchrun" launches every job through torchrun.
    single_process_launch: Literal["direct", "torchrun"] = "direct"
    cancel_grace_seconds: SecondsOrOff = 2.0
    # Jobs run this much nicer than the worker (0..19; 0: same priority). With cgroups it
    # only ranks a job's own processes among themselves (job_cpu_weight rules against the
    # host's other work); without, it is the jobs' whole CPU policy: the dashboard, the
    # database and the forwarder get the CPU first, and jobs get what the rest leaves.
    job_nice: int = Field(default=10, ge=0, le=19)
    # How much of a contended host this installation's jobs get, together, relative to other
    # work (worker/limits.py): their parent cgroup's CPU weight, where every other group at the
    # root of the hierarchy (a systemd slice or service, another installation, a session's
    # processes) weighs 100 (cgroup v2 cpu.weight; v1 cpu.shares is 10.24 times it). 400: jobs
    # get 4/5 of the CPUs against one other busy group, 2/3 against two, and never starve
    # behind unrelated processes; the API and the worker, outside, keep a share of their own.
    job_cpu_weight: int = Field(default=400, ge=1, le=10_000)
    # Jobs in a bubblewrap sandbox (worker/sandbox.py, docs/security.md): "auto" when bwrap
    # works on this machine (probed once at start; the worker says which and why), "bwrap"
    # requires it (the worker refuses to start without; the team deployment's setting), "off"
    # runs jobs as the worker's own user, seeing what it sees.
    job_isolation: Literal["auto", "bwrap", "off"] = "auto"
    # A root worker runs each sandboxed run as uid and gid job_uid_base + run id % job_uid_count:
    # a range no account or other service on the machine uses.
    job_uid_base: int = Field(default=200_000, ge=1000, le=2**31 - 2**24)
    job_uid_count: int = Field(default=100_000, ge=1, le=2**24)
    # What a sandboxed job reaches over the network (worker/job_network.py, docs/security.md):
    # "egress" its own namespace and outbound traffic, nothing of the host's services;
    # "isolated" its own loopback only; "host" the host's network, every service on it.
    job_network: Literal["egress", "isolated", "host"] = "egress"
    # Whether egress jobs reach link-local addresses, the cloud metadata service among them
    # (169.254.169.254: an instance's credentials); off unless the operator allows it.
    job_allow_link_local: bool = False
    # Each run's limits when its config says none (`resources.memory_gb`, ...; docs/security.md
    # "Limits per run"): memory of the whole job in GiB, CPUs (a quota: 0.5 is half of one),
    # disk in GB (its folder and /tmp), processes and threads at once.
    run_memory_gb: float = Field(default=8.0, gt=0, le=65536)
    run_cpus: float = Field(default=4.0, gt=0, le=4096)
    run_disk_gb: float = Field(default=50.0, gt=0, le=1_000_000)
    run_max_processes: int = Field(default=4096, ge=16, le=4_194_304)
    # Where the worker makes a cgroup per run attempt (worker/cgroups.py): under this name, which
    # may be nested (`batch/torchyard`, as Docker's --cgroup-parent), and the data dir's digest.
    # "auto": cgroups where this worker may, else rlimits (said at start); "off": rlimits alone.
    job_cgroups: Literal["auto", "off"] = "auto"
    job_cgroup_parent: str = Field(default="torchyard", pattern=CGROUP_PARENT)
    # How often the worker measures a running job's folder and /tmp against its disk_gb.
    disk_check_interval_seconds: Seconds = 2.0
    # Runs' own virtual environments (`environment.requirements`, worker/environments.py),
    # one per set of requirements, shared by every run on this host that asks for the same.
    # Empty: a folder beside the data dir (`<data_dir>-envs`). Never inside the data dir: the
    # sandbox hides that from jobs, and a job reads its environment (bound read-only).
    env_dir: Path | None = None
    # The environments' total size on disk: past it, the least recently used ones that no
    # running job uses are removed after each build.
    env_cache_max_bytes: int = Field(default=10 * 1024**3, ge=0)
    # What a job's Python sees besides torch, numpy, the torchyard SDK and tensorboard (and
    # what they need; never the server's packages unless named here): comma-separated
    # distributions of the worker's own install, a team's stack baked into its image
    # ("lightning,transformers"). worker/job_base.py links them into every job's base.
    job_packages: str = ""
    # Environment builds one worker runs at once, besides its run slots (`--concurrency`): a
    # building run holds no run slot, so runs that need no build start meanwhile (worker/slots.py).
    env_build_concurrency: int = Field(default=2, ge=1, le=64)
    # A build (pip) that takes longer fails the run.
    env_build_timeout_seconds: Seconds = 1800.0
    forwarder_interval_seconds: Seconds = 0.1
    # Spool bytes one forwarder batch (one transaction) takes at most: short enough that on
    # SQLite the one write lock is never held long (other runs, heartbeats and the API's
    # writes get it in between), large enough to keep most of the one-run rate
    # (worker/forwarder.py, worker/ingest_gate.py; bench/flood.py measures it).
    forward_batch_bytes: int = Field(default=1024**2, ge=64 * 1024, le=16 * 1024**2)
    # Backpressure at the source (torchyard.runtime.ingest_mark, worker.ingest_mark): a job
    # holds back while more than this many bytes of its spool are not ingested yet (a few
    # seconds of ingestion; 0: never), so a flooding job's viewers see it seconds late, not
    # minutes, and its run finishes within seconds of its end. Only while the worker's mark is
    # younger than spool_mark_fresh_seconds (it is refreshed at least every heartbeat): a
    # worker stopped or frozen never holds a job up longer than that.
    spool_backlog_bytes: int = Field(default=2 * 1024**2, ge=0)
    spool_mark_fresh_seconds: Seconds = 15.0
    # ... and while its oldest point not yet ingested was logged longer ago than this: a byte
    # bound alone is minutes of points for a run that gets a twelfth of a loaded host's
    # ingestion (issue 27: viewers lagged 26-75 s); 0: no age bound.
    spool_max_age_seconds: SecondsOrOff = 3.0
    # Per-run limits on what a job's output may cost the server (docs/security.md, "Limits");
    # each one hit is said on the run (app/runs/state/notices.py). Metric keys: points of keys past
    # the limit are not stored (a run page with 100,000 curves froze a browser).
    max_metric_keys_per_run: int = Field(default=10_000, ge=1)
    # The log: output past this many bytes is cut off (the file truncated, a note at the end).
    max_log_bytes: int = Field(default=1024**3, ge=4096)
    # One line of the metrics spool: a longer line is skipped and counted, never read whole.
    spool_line_max_bytes: int = Field(default=1024**2, ge=1024, le=16 * 1024**2)
    # Runs one worker trains at once (`--concurrency`; the worker raises it to GPUs + 1).
    worker_concurrency: int = 2
    worker_host: str = ""
    # How the other hosts of a multi-node run reach this worker's jobs (node 0's rendezvous,
    # the ranks' own sockets): an IP or a name. Empty: the host's primary address
    # (`resolved_worker_address`). docs/multi-node.md.
    worker_address: str = Field(default="", max_length=255, pattern=r"^[A-Za-z0-9_.:-]*$")
    # The network interface NCCL and Gloo use between hosts (NCCL_SOCKET_IFNAME,
    # GLOO_SOCKET_IFNAME of a multi-node job); empty: their own choice, which on a host with
    # several cards may be one the other hosts cannot reach (pytorch#69197).
    worker_interface: str = Field(default="", pattern=r"^[A-Za-z0-9_.:@-]{0,15}$")
    # How long a multi-node run's ready nodes wait for the rest (each building its own
    # environment) before the run fails naming the nodes that never joined (app.runs.nodes).
    node_join_seconds: Seconds = 600.0
    # Multi-node runs (resources.nodes > 1); off: refused with a 422 at resources.nodes. Their
    # jobs run in the host's network fenced by firewall rules of the run's uid
    # (worker/job_firewall.py, docs/security.md): they reach their peers, not the database,
    # the broker or the host's other services. A worker that cannot fence them (not root, no
    # nft) fails such a run with the cause, so a deployment of such workers turns them off.
    multi_node_runs: bool = True
    # A fake GPU inventory ("0,1"): allocation, leases and CUDA_VISIBLE_DEVICES are real, the
    # job runs on CPU. Empty: ask NVML (nvidia-ml-py), and no NVML means no GPUs.
    fake_gpus: str = ""
    # The module worker.gpus imports for NVML's calls: pynvml (nvidia-ml-py), or a stand-in
    # with the same functions, by module name or .py path (tests/nvml_standin.py gives a fake
    # inventory GPU stats on CPU).
    nvml_module: str = "pynvml"
    # How often the worker samples a job's system series (worker/system_metrics.py); at least
    # 1: the series' x is whole seconds since the run started. GPU efficiency: settings_efficiency.
    system_metrics_interval_seconds: Seconds = Field(default=10.0, ge=1)
    # A lease not heartbeated for this long belongs to a dead worker and is freed.
    lease_ttl_seconds: Seconds = 15.0
    # Every run in training is stamped this often; one silent for run_lost_seconds lost its
    # worker and is failed ("worker lost") or, with max_restarts left, requeued.
    run_heartbeat_seconds: Seconds = 5.0
    run_lost_seconds: Seconds = 60.0
    # PostgreSQL ends a session left idle inside a transaction this long (0: never): a process
    # frozen mid-transaction (SIGSTOP, swapped out) would otherwise keep its row locks, and the
    # reaper waiting on them could never hand its runs over. Below run_lost_seconds (checked at
    # start, on PostgreSQL: app/settings_rules.py).
    db_idle_transaction_seconds: SecondsOrOff = 30.0
    # How often the API and each worker look for lost runs (0: never).
    reap_interval_seconds: SecondsOrOff = 5.0
    # A worker that stops (Ctrl-C of `torchyard up`, SIGTERM, an upgrade) leaves its running
    # jobs training; the next worker on the host re-adopts them (worker.adoption). Off: warm
    # shutdown gives them shutdown_grace_seconds to finish, then stops them, and their runs
    # are requeued (max_restarts) or failed.
    keep_jobs_on_worker_stop: bool = True
    shutdown_grace_seconds: SecondsOrOff = 30.0
    # A job its worker left that is gone when the next worker looks (the host rebooted, the
    # container was recreated): its run is requeued from its newest checkpoint even without
    # restarts left (it did nothing wrong); off, the max_restarts rule decides.
    requeue_after_host_restart: bool = True
    # A queued GPU run that cannot fit for this long stops smaller runs from starting past it.
    starvation_seconds: Seconds = 300.0
    # How long a run that may not start yet waits before its task is re-queued to ask again.
    schedule_retry_seconds: Seconds = 0.5
    # A queued run whose task has not come by a worker for this long (while a worker is live)
    # lost its broker message and is sent again (app.runs.state.dispatch). 0: never.
    queue_resend_seconds: SecondsOrOff = 30.0
    sse_poll_seconds: Seconds = 0.2
    # Sweeps: the most trials one may plan, and how often each worker re-advances the running
    # sweeps (the safety net behind the advance a trial's end enqueues; at start, then every
    # this many seconds; 0: off, app.periodic).
    sweep_max_runs: int = Field(default=1000, ge=1)
    sweep_advance_seconds: SecondsOrOff = 60.0
    # How often each API process writes its tokens' last-use times (app/auth/token_use.py: no
    # request writes them itself); also once on the way out. 0: only on the way out.
    token_use_flush_seconds: SecondsOrOff = 60.0
    # Open event streams (/api/runs/{id}/events) one user may hold per server process; one
    # more is a 429 that names this limit. A run page holds one.
    sse_max_streams_per_user: int = Field(default=8, ge=1)
    # An open event stream re-checks its token this often and ends once it is revoked/expired
    # or its user is disabled: within 5 s is promised, with room left for a loaded box.
    sse_auth_recheck_seconds: Seconds = 2.0
    # Largest request body the API reads (413 above it); configs and forms are a few KB.
    max_body_bytes: int = 1024 * 1024
    # Code snapshots (POST /api/code, app/code/): the largest upload (a gzipped tar or a zip;
    # 413 above it), and what its contents may unpack to (a gzip bomb is refused with a 4xx):
    # members and total bytes. The worker applies the same caps when it extracts a run's copy.
    max_code_bytes: int = Field(default=200 * 1024**2, ge=1024)
    max_code_unpacked_bytes: int = Field(default=1024**3, ge=1024)
    max_code_members: int = Field(default=20_000, ge=1)
    # A snapshot no run or experiment refers to is removed when a deletion leaves it unused,
    # once it was last uploaded or chosen for a config this long ago (a config being saved
    # in a concurrent transaction is not yet visible to the deletion's check).
    code_unused_grace_seconds: SecondsOrOff = 600.0
    # A worker unpacks a snapshot once per host into <data_dir>/snapshots/, shared read-only
    # by every run that uses it (worker/snapshots.py). Past this total, the least recently
    # used ones no running job holds are removed (0: each as soon as its last run ends).
    snapshot_cache_max_bytes: int = Field(default=2 * 1024**3, ge=0)
    # What one user may keep stored (stored code snapshots they uploaded and their runs'
    # folders, checkpoints and files; app/users/quota.py), in GB (10**9 bytes); over it an
    # upload is a 413 and a new run a 422 that names the quota and the use. 0: no quota.
    user_quota_gb: float = Field(default=0.0, ge=0)
    # The box's default ceiling on a run's `resources.disk_gb` (app/users/ceilings.py): this
    # share of the data dir's free space. An admin's ceilings per role or user replace it.
    ceiling_disk_share: float = Field(default=0.5, gt=0, le=1)

    # Notifications (app/notifications/). E-mail goes through this box's SMTP server (empty
    # host: no e-mail; the settings page says so); user and password only when it wants a login.
    smtp_host: str = ""
    smtp_port: int = Field(default=25, ge=1, le=65535)
    smtp_from: str = "torchyard@localhost"
    smtp_user: str = ""
    smtp_password: str = ""
    smtp_starttls: bool = False
    # Each delivery is tried up to this many times; the delays between tries start at
    # notify_retry_seconds and double. A try waits at most notify_timeout_seconds.
    notify_max_attempts: int = Field(default=4, ge=1, le=20)
    notify_retry_seconds: SecondsOrOff = 15.0
    notify_timeout_seconds: Seconds = Field(default=10.0, le=120)
    # How often each API process and worker sends what is due and runs the periodic checks
    # (stalled runs, idle GPUs); 0: never (a process that should not deliver).
    notify_poll_seconds: SecondsOrOff = 5.0
    # How long one of the users' "N minutes" (stalled, GPU idle) lasts: tests shrink it.
    notify_minute_seconds: Seconds = 60.0
    # Webhooks reach public addresses only (no loopback, private, link-local, ... address: a
    # user's URL must not make the server call its own network). Comma-separated CIDR ranges
    # listed here are allowed too ("10.1.2.0/24" for a Mattermost on the LAN).
    notify_webhook_allow_networks: str = ""
    # "Send test" at most once per this many seconds per user (it is a request to send mail).
    notify_test_cooldown_seconds: SecondsOrOff = 10.0
    # A run failed "worker lost" by a reaper is a guess its stalled worker may still correct
    # (app.runs.state.lifecycle.settle, with the job's real exit status): its message waits this
    # long, and a correction in time replaces it, so only the run's final outcome is sent.
    notify_worker_lost_hold_seconds: SecondsOrOff = 120.0
    # The dashboard's address ("https://gpu.example.com"): messages link to the run's page.
    public_url: str = ""

    @field_validator("notify_webhook_allow_networks")
    @classmethod
    def _networks(cls, value: str) -> str:
        """A typo here would otherwise surface only as failed deliveries."""
        for network in filter(None, (n.strip() for n in value.split(","))):
            ipaddress.ip_network(network, strict=False)  # ValueError: the process refuses to start
        return value

    @model_validator(mode="after")
    def _settings_work_together(self) -> Self:
        """Settings that cannot work together refuse the start (app/settings_rules.py)."""
        refuse_conflicts(self)
        return self

    @property
    def resolved_worker_address(self) -> str:
        """`worker_address`, or the address of the interface that routes to other hosts."""
        return self.worker_address or primary_address()

    @property
    def resolved_data_dir(self) -> Path:
        return self.data_dir.expanduser().resolve()

    def make_data_dir(self) -> Path:
        """The data dir, 0700 (also when an older version made it 755): it holds the database,
        the broker and every run's files. With the processes' umask 077 (PRIVATE_UMASK) each
        file in it is 0600."""
        path = self.resolved_data_dir
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):  # another user's folder: theirs to set
            path.chmod(0o700)
        return path

    @property
    def resolved_env_dir(self) -> Path:
        data = self.resolved_data_dir
        if self.env_dir is None:
            return data.with_name(f"{data.name}-envs")
        path = self.env_dir.expanduser().resolve()
        if within(path, data):
            raise ValueError(
                f"TORCHYARD_ENV_DIR ({path}) must not be inside the data dir ({data}): the "
                "sandbox hides the data dir from jobs, and a job runs from its environment"
            )
        return path

    @property
    def job_package_names(self) -> tuple[str, ...]:
        return tuple(filter(None, (p.strip() for p in self.job_packages.split(","))))

    @property
    def runs_dir(self) -> Path:
        return self.resolved_data_dir / "runs"

    @property
    def snapshots_dir(self) -> Path:
        return self.resolved_data_dir / "snapshots"

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.resolved_data_dir / 'torchyard.db'}"

    @property
    def resolved_broker_url(self) -> str:
        if self.broker_url:
            return self.broker_url
        return f"sqla+sqlite:///{self.resolved_data_dir / 'broker.db'}"

    @property
    def service_urls(self) -> tuple[str, ...]:
        """The services a job must not reach (worker/job_network.py): database and broker."""
        return (self.resolved_database_url, self.resolved_broker_url)

    def run_dir(self, run_id: int) -> Path:
        return self.runs_dir / str(run_id)


def primary_address() -> str:
    """The source address this host would use towards other hosts: a UDP socket "connected"
    to a public address sends nothing, it only asks the kernel for its route. Without a route
    (no network): the host name's address, else loopback."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: never answered, only routed
        return str(probe.getsockname()[0])
    with contextlib.suppress(OSError):
        return socket.gethostbyname(socket.gethostname())
    return "127.0.0.1"


@lru_cache
def get_settings() -> Settings:
    return Settings()
