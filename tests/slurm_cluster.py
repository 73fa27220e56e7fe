"""A real, private Slurm cluster for the Slurm pool's tests (issue 40): Debian's munge,
slurmctld and slurmd (Slurm 22.05 on Debian 12, `make slurm`), started from a folder of their
own and gone afterwards.

`with SlurmCluster() as cluster:` starts, in a temp folder of its own (short: unix sockets):
- munged with its own key and socket (`AuthInfo=socket=...`: the machine's /run/munge and
  /etc/munge are never used, nor is any service of the packages);
- slurmctld and one slurmd per node (`slurmd -N node-<k>`) from one generated slurm.conf, with
  ports picked free at start (`SlurmctldPort`, `SlurmdPort`): several clusters may run at once
  on this machine (other test processes, other engineers), each its own ClusterName, state,
  spool, pid and log files;
- per node `Gres=gpu:<gpus_per_node>`, declared in gres.conf as `File=<folder>/nvidia[0-N]`:
  character devices with /dev/null's numbers where mknod is allowed (Slurm then sets
  CUDA_VISIBLE_DEVICES and SLURM_JOB_GPUS in a job as on real GPUs), empty files otherwise
  (Slurm counts and allocates them, but logs that they are not devices and sets no variables);
- `select/cons_tres` with cores and memory consumable (`DefMemPerCPU`, so a job without
  `--mem` does not take a whole node's memory), `sched/backfill` every second (it gives a
  pending job its estimated start time), `proctrack/linuxproc` and `task/none` (no cgroup
  plugin: the tests' machine may have no cgroup hierarchy Slurm can use), `KillWait=2`.

Accounting: there is no slurmdbd (it needs a MySQL/MariaDB server), so
`AccountingStorageType=accounting_storage/none` and `sacct` answers only "Slurm accounting
storage is disabled" (exit 1). What slurmctld remembers serves instead: `squeue --json` (22.05
lists every job it holds, ended ones included, and ignores its filter options with --json),
`scontrol show job` (text; 22.05 has no --json there), for `MinJobAge` seconds after a job
ends (600 here, the default 300). Each ended job is also appended to `jobcomp.txt`
(`jobcomp/filetxt`: one `key=value` line a job, JobState and ExitCode `code:signal`) for a
test to read.

`nodes=2` puts each slurmd in a network namespace of its own (tests/netns_hosts.py: a bridge
and a veth pair a node, a private /24), slurmctld in the root namespace listening on the
bridge's address (`SlurmctldHost=localhost(<bridge address>)`), each node at its own address
(`NodeAddr`), two fake GPUs each by default.

The Slurm commands find the cluster through `SLURM_CONF` (`cluster.env`, or `activated()`
which sets it in this process's environment). Stopping cancels every job, waits until none
runs, stops the daemons and removes the folder. Without Slurm (`why_no_slurm`) `require_slurm`
skips, except on CI (CI=true), where it fails: the Slurm pool's tests must not silently vanish.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import pytest

from tests.netns_hosts import NetnsHosts, require_netns
from tests.stack import start_logged, stop_process
from tests.waits import wait_for

SBIN = Path("/usr/sbin")
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scancel", "scontrol")
PARTITION = "debug"
PORT_TRIES = 3
_NUMBERS = itertools.count()


def command(name: str) -> str:
    """The path of a Slurm or munge program: daemons live in /usr/sbin, not on every PATH."""
    found = shutil.which(name) or (str(SBIN / name) if (SBIN / name).is_file() else None)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (make slurm)")
    return found


def why_no_slurm() -> str | None:
    """Why no cluster can start here (None: it can): programs missing, or not root (slurmd
    and munged run as root here, as SlurmUser=root)."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if _which(name) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (make slurm)"
    if os.geteuid() != 0:
        return "slurmd must run as root"
    return None


def require_slurm(nodes: int = 1) -> None:
    """Skip a test that needs a Slurm cluster where none can start; on CI fail it instead."""
    reason = why_no_slurm()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Slurm tests, but Slurm cannot run here: {reason}")
        pytest.skip(f"no Slurm here: {reason}")
    if nodes > 1:
        require_netns()


def _which(name: str) -> str | None:
    try:
        return command(name)
    except FileNotFoundError:
        return None


def free_port(host: str = "") -> int:
    """A TCP port free now on every address (slurmctld and slurmd bind all of them)."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def slurm_conf(
    *,
    folder: Path,
    cluster_name: str,
    controller: str,
    ctld_port: int,
    slurmd_port: int,
    nodes: dict[str, str],
    gpus_per_node: int,
    cpus_per_node: int,
    memory_mb: int,
    min_job_age: int,
) -> str:
    """The one-file slurm.conf of a test cluster; `nodes` maps each node name to its address,
    `controller` is slurmctld's (`localhost`, or `localhost(<address>)` for namespaced nodes)."""
    lines = [
        f"ClusterName={cluster_name}",
        f"SlurmctldHost={controller}",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={folder / 'munge.sock'}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool' / '%n'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd-%n.log'}",
        "MailProg=/bin/true",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={folder / 'jobcomp.txt'}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=100",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=1",
        "GresTypes=gpu",
        "MpiDefault=none",
        "ReturnToService=2",
        "KillWait=2",
        f"MinJobAge={min_job_age}",
        # A round trip between the daemons may take this long (10 s by default): on the
        # suite's saturated 2-core box srun's step launch timed out once ("Socket timed out on
        # send/recv operation", test_slurm_track_forgotten in a fresh-clone CI), failing the
        # run as a real cluster's would not.
        "MessageTimeout=60",
        # the node's CPUs and memory as written here, whatever the machine has
        "SlurmdParameters=config_overrides",
    ]
    for name, address in nodes.items():
        lines.append(
            f"NodeName={name} NodeAddr={address} CPUs={cpus_per_node} "
            f"RealMemory={memory_mb} Gres=gpu:{gpus_per_node} State=UNKNOWN"
        )
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(nodes)} Default=YES State=UP")
    return "\n".join(lines) + "\n"


@dataclass
class SlurmCluster:
    """A private cluster; `with SlurmCluster(nodes=2) as cluster:` (module docstring)."""

    nodes: int = 1
    gpus_per_node: int = 2
    cpus_per_node: int = 4
    memory_mb: int = 4000
    min_job_age: int = 600
    start_timeout: float = 90
    folder: Path = field(init=False)
    name: str = field(init=False)
    node_names: list[str] = field(init=False)
    fake_gpus_are_devices: bool = field(init=False, default=False)
    _daemons: dict[str, subprocess.Popen[bytes]] = field(init=False, default_factory=dict)
    _hosts: NetnsHosts | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.name = f"ty{os.getpid()}x{next(_NUMBERS)}"
        self.node_names = [f"node-{k}" for k in range(self.nodes)]

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with the cluster's SLURM_CONF: for the Slurm commands."""
        return dict(os.environ, SLURM_CONF=str(self.conf))

    @property
    def partition(self) -> str:
        return PARTITION

    def __enter__(self) -> SlurmCluster:
        self.folder = Path(tempfile.mkdtemp(prefix="tyslurm-", dir="/tmp"))
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        self.folder.chmod(0o755)  # munged wants its socket's folders searchable by all
        for sub in ("state", "spool", "gpus"):
            (self.folder / sub).mkdir()
        addresses = {name: "127.0.0.1" for name in self.node_names}
        controller = "localhost"
        if self.nodes > 1:
            self._hosts = NetnsHosts(self.nodes).__enter__()
            addresses = {
                name: host.address
                for name, host in zip(self.node_names, self._hosts.hosts, strict=True)
            }
            controller = f"localhost({self._hosts.bridge_address})"
        self._write_gres()
        self._start_munged()
        # A port found free may be taken before slurmctld or slurmd binds it (another test
        # process, another cluster starting): then the daemons start again on other ports.
        for attempt in range(1, PORT_TRIES + 1):
            self.conf.write_text(
                slurm_conf(
                    folder=self.folder,
                    cluster_name=self.name,
                    controller=controller,
                    ctld_port=free_port(),
                    slurmd_port=free_port(),
                    nodes=addresses,
                    gpus_per_node=self.gpus_per_node,
                    cpus_per_node=self.cpus_per_node,
                    memory_mb=self.memory_mb,
                    min_job_age=self.min_job_age,
                )
            )
            self._daemons["slurmctld"] = start_logged(
                [command("slurmctld"), "-D", "-i"], self.env, self.folder / "slurmctld.out"
            )
            for name in self.node_names:
                self.start_node(name)
            try:
                wait_for(
                    lambda: self._alive() and set(self.node_states().values()) == {"idle"},
                    timeout=self.start_timeout,
                    what=lambda: f"every node idle: {self.node_states()}\n{self.logs()}",
                    every=0.2,
                )
                return
            except RuntimeError as exc:
                if attempt == PORT_TRIES or "Address already in use" not in str(exc):
                    raise
                for name in [*self.node_names, "slurmctld"]:
                    stop_process(self._daemons.pop(name), timeout=15)
                for log in [*self.folder.glob("slurm*.log"), *self.folder.glob("slurm*.out")]:
                    log.rename(log.with_name(f"{log.name}.try{attempt}"))

    def _write_gres(self) -> None:
        lines = []
        for name in self.node_names:
            gpus = self.folder / "gpus" / name
            gpus.mkdir()
            for k in range(self.gpus_per_node):
                self.fake_gpus_are_devices = _fake_gpu(gpus / f"nvidia{k}")
            node = f"NodeName={name} " if self.nodes > 1 else ""
            lines.append(f"{node}Name=gpu File={gpus}/nvidia[0-{self.gpus_per_node - 1}]")
        (self.folder / "gres.conf").write_text("\n".join(lines) + "\n")

    def _start_munged(self) -> None:
        key = self.folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        f = self.folder
        self._daemons["munged"] = start_logged(
            [
                command("munged"),
                "--foreground",
                "--force",
                f"--socket={f / 'munge.sock'}",
                f"--key-file={key}",
                f"--pid-file={f / 'munged.pid'}",
                f"--log-file={f / 'munged.log'}",
                f"--seed-file={f / 'munged.seed'}",
            ],
            dict(os.environ),
            f / "munged.out",
        )
        wait_for(
            lambda: (f / "munge.sock").exists() or self._daemons["munged"].poll() is not None,
            timeout=30,
            what="munged's socket",
        )
        if self._daemons["munged"].poll() is not None:
            raise RuntimeError(f"munged did not start:\n{self.logs()}")

    def start_node(self, name: str) -> None:
        """Start node `name`'s slurmd (again, after `stop_node`)."""
        (self.folder / "spool" / name).mkdir(exist_ok=True)
        argv = [command("slurmd"), "-D", "-N", name]
        log = self.folder / f"slurmd-{name}.out"
        if self._hosts is None:
            self._daemons[name] = start_logged(argv, self.env, log)
        else:  # with the machine's cgroup mounts, which slurmd needs, in the namespace
            host = self._hosts.hosts[self.node_names.index(name)]
            self._daemons[name] = self._hosts.start(host, argv, self.env, log)

    def node_argv(self, name: str, argv: list[str]) -> list[str]:
        """`argv` run where node `name` runs: in its network namespace when it has one."""
        if self._hosts is None:
            return argv
        return self._hosts.hosts[self.node_names.index(name)].argv(argv)

    def stop_node(self, name: str) -> None:
        """Stop node `name`'s slurmd (its running job steps go on, as on a real node; `close`
        starts it again to end them)."""
        stop_process(self._daemons.pop(name), timeout=15)

    def fail_node(self, name: str, reason: str = "failed by a test") -> None:
        """Node `name` DOWN as Slurm marks a failed node: its jobs end NODE_FAIL, or are
        requeued (a batch job by default: `--no-requeue` keeps it ended). Its slurmd still
        answers, so it returns to service by itself at once (ReturnToService=2)."""
        done = self.run("scontrol", "update", f"nodename={name}", "state=down", f"reason={reason}")
        assert done.returncode == 0, done.stderr

    def _alive(self) -> bool:
        dead = [name for name, proc in self._daemons.items() if proc.poll() is not None]
        if dead:
            raise RuntimeError(f"exited: {', '.join(dead)}\n{self.logs()}")
        return True

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A Slurm command against this cluster (not checked: look at returncode)."""
        return subprocess.run(
            [command(argv[0]), *argv[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo says it (`idle`, `mixed`, `alloc`, `down*`, ...)."""
        done = self.run("sinfo", "--noheader", "--Node", "--format=%N %t")
        rows = (line.split() for line in done.stdout.splitlines())
        return {row[0]: row[1] for row in rows if len(row) == 2}

    def logs(self, tail: int = 30) -> str:
        """The last lines of every daemon's log: for a failure's message."""
        parts = []
        for path in sorted(self.folder.glob("*.log")) + sorted(self.folder.glob("*.out")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def close(self) -> None:
        """Every job cancelled and ended, the daemons stopped, the folder removed: each step
        whatever the others did."""
        if "slurmctld" in self._daemons and self._daemons["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                for name in self.node_names:  # a stopped node's steps run on: its slurmd ends them
                    if name not in self._daemons:
                        self.start_node(name)
                self.end_jobs()
        for name in [*self.node_names, "slurmctld", "munged"]:
            proc = self._daemons.pop(name, None)
            if proc is not None:
                with contextlib.suppress(Exception):
                    stop_process(proc, timeout=15)
        if self._hosts is not None:
            self._hosts.close()
            self._hosts = None
        if hasattr(self, "folder"):
            shutil.rmtree(self.folder, ignore_errors=True)

    def end_jobs(self) -> None:
        """Cancel every job of the cluster and wait until none is left (between tests)."""
        self.run("scancel", "--full", f"--partition={PARTITION}", timeout=30)
        wait_for(
            lambda: not self.run("squeue", "--noheader", "--format=%i").stdout.strip(),
            timeout=30,
            what=lambda: f"no job left: {self.run('squeue').stdout}",
            every=0.2,
        )


def _fake_gpu(path: Path) -> bool:
    """A fake GPU device file: a character device (/dev/null's numbers) where mknod is
    allowed, else an empty file; True for a device."""
    try:
        os.mknod(path, 0o666 | 0o020000, os.makedev(1, 3))
        return True
    except OSError:
        path.touch()
        return False


@contextlib.contextmanager
def activated(cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """SLURM_CONF of this process pointed at `cluster` while inside (the code under test runs
    the Slurm commands with the process's environment), restored after."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", str(cluster.conf))
        yield cluster


@contextlib.contextmanager
def slurm_cluster(nodes: int = 1, **options: int) -> Iterator[SlurmCluster]:
    """For a fixture: `require_slurm`, a started cluster, activated; stopped at the end.
    `yield from` it in a module fixture: `with slurm_cluster() as cluster: yield cluster`."""
    require_slurm(nodes)
    with SlurmCluster(nodes=nodes, **options) as cluster, activated(cluster):
        yield cluster
