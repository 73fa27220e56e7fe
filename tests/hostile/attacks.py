"""The standing hostile-member suite (issue 37): every attack a member's config, code or job
has tried on torchyard, and the tests that show it held. Each test runs where its subject
does (both stacks, or the first pass for what no database changes); conftest marks them all
`hostile`, so `pytest -m hostile` runs the suite alone. docs/security.md's table lists the same
(tests/hostile/test_attacks.py keeps the two and the tests in step)."""

from __future__ import annotations

ATTACKS: dict[str, tuple[str, ...]] = {
    "a loader variable (LD_AUDIT, LD_PRELOAD) or a shell's (BASH_ENV, ENV) in a run's env "
    "naming the member's library: run as root by the worker's helpers": (
        "tests/hostile/test_root_never_sees_a_runs_env.py::"
        "test_a_loader_variable_in_a_runs_env_runs_nothing_as_root",
        "tests/hostile/test_run_env_end_to_end.py::"
        "test_a_runs_env_runs_the_members_files_only_inside_its_job",
    ),
    "the loader's and libc's variables in a config, an override": (
        "tests/hostile/test_env_refused.py::"
        "test_a_loader_variable_in_an_experiments_env_is_422_naming_it",
        "tests/hostile/test_env_refused.py::"
        "test_a_loader_variable_in_a_runs_overrides_is_422_naming_it",
    ),
    "the service's own variables (TORCHYARD_*, credentials) in a run's env": (
        "tests/test_script_configs.py::test_malformed_script_configs_are_422_at_the_field",
        "tests/test_sandbox.py::test_the_job_gets_none_of_the_services_variables",
    ),
    "limits above what the box can give (memory_gb 65536, cpus 4096, ...)": (
        "tests/test_ceilings.py::"
        "test_a_member_asking_above_the_box_is_422_naming_the_field_and_the_ceiling",
    ),
    "a fork bomb, a memory hog, a disk filler": (
        "tests/test_e2e_limits.py::"
        "test_jobs_past_their_limits_end_naming_them_while_others_carry_on",
        "tests/test_cgroups.py::test_a_fork_bomb_is_held_at_pids_max_and_counted",
    ),
    "/tmp past the run's size; the host's disk counted as the job's": (
        "tests/test_limits.py::test_the_jobs_tmp_and_shm_have_the_runs_sizes",
        "tests/test_limits.py::"
        "test_tmp_is_not_measured_through_a_process_whose_root_is_still_the_hosts",
    ),
    "a log flood": (
        "tests/test_log_store.py::"
        "test_a_nodes_log_is_cut_once_at_the_limit_and_never_ships_past_its_note",
    ),
    "hostile job files (a FIFO for its log, poisoned spool lines, a 20 MiB line)": (
        "tests/test_e2e_hostile_output.py::"
        "test_a_hostile_jobs_files_stall_nothing_and_lose_no_good_point",
    ),
    "zip and gzip bombs in uploaded code": (
        "tests/test_code_snapshots.py::test_a_gzip_bomb_is_refused_by_its_unpacked_size",
        "tests/test_code_snapshots.py::test_a_zip_gets_the_same_checks",
    ),
    "a large snapshot's unpack holding a run's heartbeat": (
        "tests/test_liveness.py::test_a_run_waiting_for_its_snapshot_to_unpack_keeps_heartbeating",
    ),
    "requirements tricks (pip options, URLs, paths)": (
        "tests/test_requirements.py::test_options_urls_and_paths_are_refused",
    ),
    "MLflow writes into another member's run": (
        "tests/test_mlflow_authz.py::test_mlflow_route_authorization",
    ),
    "checkpoint, log and file path traversal": (
        "tests/test_path_safety.py::test_checkpoint_download_stays_inside",
        "tests/test_path_safety.py::test_logs_are_the_runs_own",
        "tests/test_job_files.py::test_a_regular_file_is_read_from_the_descriptor_that_was_checked",
    ),
    "webhook SSRF (loopback, private, link-local and metadata addresses)": (
        "tests/test_notifications_api.py::"
        "test_a_webhook_url_that_is_not_public_http_is_a_422_naming_it",
    ),
    "HTML in user-controlled fields (params, names, metric keys)": (
        "tests/test_runs_views_config.py::test_config_and_variant_form_show_hostile_values_as_text",
        "tests/browser/test_page_security.py::test_a_metric_key_that_is_html_is_shown_as_text",
    ),
    "a multi-node job connecting to another run's store on a peer host": (
        "tests/test_job_firewall.py::"
        "test_the_rules_let_the_uid_reach_its_peers_and_nothing_of_the_host",
        "tests/test_multi_node.py::"
        "test_a_multi_node_job_cannot_reach_another_runs_store_on_its_peers",
    ),
    "a 2-node run failed 'lost' while its node waited for a slot": (
        "tests/test_run_nodes.py::test_a_node_waiting_for_a_slot_on_a_live_host_is_not_lost",
    ),
    "the job network's reach to every host service, another run, cloud metadata": (
        "tests/test_job_network.py::test_a_members_job_reaches_no_host_service_nor_another_run",
        "tests/test_job_network.py::"
        "test_link_local_and_metadata_addresses_are_blocked_unless_the_operator_allows_them",
    ),
}


def hostile_tests() -> set[str]:
    """Every test id the suite names ("path::function")."""
    return {test for tests in ATTACKS.values() for test in tests}
