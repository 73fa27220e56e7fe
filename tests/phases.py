"""Which slow tests `make test` may run beside another stream, and which want the CPU to
themselves (issue 26: CI under 40 minutes on 2 cores; docs/testing.md).

A slow test is `timed` when it asserts a time bound that another stream's load could break: a
fault test whose heartbeats, lease TTL or requeue window are seconds (chaos, fencing,
liveness, queue faults), "gone within 5 s of a cancel / SIGTERM", "finished within 10 s of its
job's end", "answers within a second beside a fork bomb". `make test` runs the timed tests one
pass after the other at the normal priority, and everything else beside them in an idle cgroup
(bench/cpu_idle.py), which gets only the CPU the timed tests leave. Every other slow test
(training to a quality, sweeps, third-party scripts, packaging, environments built with pip)
waits on conditions with minutes of margin: its slowdown costs no failure.

The idle work is two streams: `SECOND_STREAM_MODULES` (marker `second_stream`) are embedded
modules run in the second one, with the services pass's untimed tests, to balance the two (their
own pytest process, job uid range and Redis database). The browser tests run after the timed
ones, at the normal priority (their Playwright waits are seconds), in two runs at once:
`FIRST_STREAM_BROWSER_MODULES` (marker `browser_first`) and the rest.
"""

from __future__ import annotations

TIMED_MODULES = frozenset(
    {
        "test_api_shutdown",  # the server gone within 5 s of SIGTERM with streams open
        "test_chaos",  # kill -9 / SIGSTOP with 1 s heartbeats and a 5 s lease TTL
        "test_cli_up",  # a killed worker replaced within 10 s
        "test_db_connections_cut",  # PostgreSQL's connections cut under load (PostgreSQL only)
        "test_e2e_hostile_output",  # the API answers within 1 s while a job floods its log
        "test_e2e_limits",  # logins answer within a second beside a fork bomb
        "test_e2e_host_share",  # a job's CPU share beside a hog; ENOSPC recorded within 10 s
        "test_e2e_efficiency",  # its "3 minutes" of GPU idleness are 3 s
        "test_e2e_notifications",  # its "3 minutes" are 3 s, retries 0.3 s
        "test_fencing_e2e",  # 1 s heartbeats, 5 s lease TTL, the old job gone within 5 s
        "test_gpu_leases",  # a 5 s lease TTL
        "test_ingest_gate",  # each flooding run finished within 10 s of its job's end
        "test_liveness",  # 1 s heartbeats, a 5 s lease TTL, 1 s shutdown grace
        "test_pg_restart",  # a PostgreSQL restart under a running job (PostgreSQL only)
        "test_queue_faults",  # a lost queued run re-sent and started within 60 s
        "test_queue_faults_redis",  # its own Redis killed and restarted under a busy worker
        "test_ready",  # ready again soon after the database or broker comes back
        "test_separate_hosts",  # hosts heartbeat every 2 s against a 6 s lease TTL
        "test_standby",  # the server gone within 5 s, its spare answering within 15 s
        "test_supervisor_cpu_hog",  # under 10 busy loops a core: the spare answers within 5 s
    }
)

SIDE_BY_SIDE_MODULES = frozenset(
    {
        "test_cli",  # submit/follow/sweeps through the CLI: waits of 60-120 s
        "test_cli_experiments",
        "test_cli_export",
        "test_mlflow_source",  # `torchyard import mlflow`: a real MLflow server starts (~20-90 s)
        "test_tensorboard_source",  # `torchyard import tensorboard` against a uvicorn server
        "test_wandb_source",  # `torchyard import wandb`: the wandb client writes offline runs
        "test_aim_source",  # `torchyard import aim`: aim.Run writes repos in subprocesses
        "test_cli_run_files",
        "test_cli_runs",
        "test_cli_views",
        "test_e2e_code",
        "test_e2e_config_env",
        "test_e2e_ddp",  # 1 vs 2 ranks to the same accuracy
        "test_e2e_ddp_exit",  # 12 DDP runs, each under 60 s (they take ~4 s)
        "test_e2e_environments",  # pip builds; the cancel during a build is timed
        "test_e2e_hf",
        "test_e2e_isolation",  # the sandbox; the daemon gone within 5 s of a cancel is timed
        "test_e2e_job_output",
        "test_e2e_lightning",  # Lightning DDP; its cancel within 5 s is timed
        "test_e2e_mlflow_job",
        "test_fairshare_worker",  # 8 short runs on a 2-GPU fake worker
        "test_torchyard_sdk_config",  # init(config=...) through a real job: params, filter, export
        "test_e2e_retention",
        "test_e2e_runs",  # training quality and seeding; the cancel within 5 s is timed
        "test_e2e_script_folder",
        "test_e2e_scripts",
        "test_e2e_sessions",  # a real JupyterLab through the proxy; waits of 60-240 s
        "test_e2e_submit_code",
        "test_e2e_sweeps",  # samplers' quality; the median rule's lease freed within 2 s is timed
        "test_e2e_tensorboard_media",
        "test_pools_workers",  # two pools' workers on one broker: waits of 120-180 s
        "test_environments",  # pip builds; the build stopped at its time limit is timed
        "test_job_entry",  # torchrun's ranks and their output, waits of 60 s
        "test_job_exit",
        "test_job_network",  # what a sandboxed job reaches (each test process its own ports)
        "test_netns_hosts",  # namespaces and bridges named by the test process's pid
        # one shared cluster of two namespace hosts; its tests with a bound (every process
        # gone within 10 s of a rank's failure, 5 s of a cancel, a worker killed within the
        # run-lost window) are timed where they are, the rest (the world of four, the job
        # network, two runs in turn, the resume: ~half the module) run side by side
        "test_multi_node",
        "test_no_secrets_leak",
        "test_no_worker",  # waits for the TTL to pass: load only lengthens the wait
        "test_prometheus",
        "test_recipes",
        "test_resume",
        "test_slurm_boundary",  # one sandboxed Slurm run probing its boundary: ~30 s
        "test_slurm_boundary_service_account",  # a service-account stack and one Slurm run
        "test_slurm_cluster",  # a private Slurm cluster runs jobs (waits of 30-60 s)
        "test_slurm_commands",  # sbatch/squeue/scancel on a private cluster; its cancel is timed
        "test_slurm_executor",  # the Slurm pool end to end; its cancel test (10 s) is timed
        "test_slurm_executor_multi_node",  # a 2-node Slurm job: minutes; its cancel is timed
        "test_slurm_executor_side_by_side",  # a local and a Slurm run: waits of minutes
        "test_slurm_executor_ops",  # node failures, refusals, time limits on a Slurm cluster
        "test_slurm_track_forgotten",  # jobs Slurm forgets (MinJobAge=2): waits of ~1 min each
        "test_system_metrics",
        "test_wheel",  # builds and installs the wheel in a venv: minutes of margin
        "test_packaging",  # a wheel of a used clone, its base install (uv), every import
    }
)

# Embedded side-by-side slow modules that run in the other stream of `make test`'s untimed slow
# phase, after the services pass's (the Slurm pool's tests, about half the embedded pass's
# untimed slow time in issue 38's CI): chosen to balance the two streams, as whole modules
# (each starts its own stack or server, so moving one moves its setup with it). Seconds from
# the CI of a9cf565 (quiet box), where the streams were 959 s ‖ 618 + 569 s with the MLflow
# and Aim importers here too (133 s: back in the first stream since).
SECOND_STREAM_MODULES = frozenset(
    {
        "test_e2e_sweeps",  # 162 s: samplers trained to a quality
        "test_wheel",  # 110 s: builds the wheel and starts it from a fresh venv
        "test_multi_node",  # 127 s: its untimed tests (the timed ones: the timed stream)
        # Stop 52's CI (fresh clone of 2267c3a): the first idle stream (the checks, 698 s in the
        # idle cgroup, then 1,641 s of tests) ended 302 s after this one (887 + 1,136 s).
        "test_e2e_sessions",  # 80 s: a real JupyterLab through the proxy
        "test_fairshare_worker",  # 80 s: 8 short runs on a 2-GPU fake worker
    }
)

# The browser tests run in two pytest runs at once after the timed tests, each with a live
# stack of its own: these modules (about 180 s in stop 49's CI) and the rest (about 230 s).
FIRST_STREAM_BROWSER_MODULES = frozenset(
    {
        "test_sweep_page",  # 45 s
        "test_page_widths",  # 31 s
        "test_run_lifecycle",  # 28 s
        "test_connection_lost",  # 22 s: a server of its own
        "test_variant_resume",  # 21 s
        "test_page_security",  # 18 s
        "test_screenshots",  # 16 s
    }
)
