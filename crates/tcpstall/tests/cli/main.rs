//! End-to-end tests of the `tcpstall` binary: one test binary, one module per area. The harness
//! is `libtest-mimic` (see support.rs): a test that needs root or a tool says so as `ignored`
//! with the reason outside CI, and fails under `CI=true`.

mod advise;
mod advise_run;
mod explain;
mod explain_fuzz;
mod install;
mod kernel;
mod kevidence;
mod lab;
mod leftovers;
mod link;
mod owners;
mod prometheus;
mod remote;
mod report;
mod seed003;
mod simulate;
mod support;
mod validation;
mod watch;

use support::{needs, test, Need};

macro_rules! t {
    ($m:ident :: $f:ident) => {
        test(concat!(stringify!($m), "::", stringify!($f)), $m::$f)
    };
    ($m:ident :: $f:ident, $($need:expr),+) => {
        needs(concat!(stringify!($m), "::", stringify!($f)), &[$($need),+], $m::$f)
    };
}

fn setup_trials() -> Vec<libtest_mimic::Trial> {
    use Need::{Root, Tool};
    vec![
        t!(seed003::route_quickack_and_thinning_move_the_ack_ratio, Root, Tool("ethtool"), Tool("iptables")),
        t!(seed003::a_killed_veth_run_is_swept_by_the_next, Root, Tool("ethtool"), Tool("iptables")),
        t!(seed003::matrix_flags_fail_in_one_line_before_running, Root),
        t!(
            leftovers::a_run_killed_mid_way_is_cleaned_up_by_the_next_run_of_another_kind,
            Root,
            Tool("ip"),
            Tool("ethtool"),
            Tool("iptables")
        ),
        t!(watch::watch_finds_the_stalling_pair_only_and_keeps_its_packets, Root, Tool("tcpdump")),
        t!(watch::watch_without_cap_net_raw_says_so, Root, Tool("setpriv")),
        t!(watch::watch_bad_flags_and_ctrl_c, Root),
        t!(kevidence::lab_rows_carry_kernel_evidence_and_no_kernel_turns_it_off, Root),
        t!(kevidence::pinned_rows_keep_the_readers_off_the_timed_cpus_and_still_record, Root),
        t!(kevidence::lab_without_root_says_once_why_there_is_no_kernel_evidence, Root, Tool("setpriv")),
        t!(kevidence::watch_kernel_counts_the_writes_of_the_watched_flow, Root),
        t!(
            owners::watch_and_sockets_name_the_program_that_stalls,
            Root,
            Tool("python3"),
            Tool("strace"),
            Tool("iptables")
        ),
        t!(prometheus::prometheus_answers_stalls_by_cause_and_command, Root, Tool("python3"), Tool("prometheus")),
        t!(kevidence::kernel_writes_precede_the_packets_that_carry_them, Root),
        t!(kevidence::a_thinking_nodelay_server_is_application_with_the_kernel_write_time, Root),
        t!(kevidence::a_periodic_nagle_sender_is_nagle_delayed_ack_for_its_real_waits, Root),
        t!(kevidence::rows_side_by_side_record_the_reads_asked_for, Root),
        t!(advise::a_new_connection_per_request_avoids_seed_001s_stall),
        t!(advise::busy_poll_runs_reads_back_and_reports_its_cpu),
        t!(advise::a_user_written_scenario_file_runs_in_simulate_and_lab),
        t!(advise::a_broken_scenario_file_names_the_line),
        t!(advise::inline_exchange_runs_and_bad_turns_are_one_line),
        t!(advise::scenarios_show_prints_a_file_that_runs_like_the_built_in),
        t!(advise::advise_on_seed_001_recommends_a_client_side_gathered_write_or_cork),
        t!(advise::advise_prints_the_code_in_each_language),
        t!(advise::advise_fail_on_stall_and_peer_profile),
        t!(advise::replay_and_advise_a_header_body_server),
        t!(advise::replay_prints_one_json_document),
        t!(advise::advise_declares_the_tie_and_the_rule_that_chose),
        t!(advise::signals_on_advise_and_replay_keep_the_finished_work),
        t!(install::completions_and_man_page_are_generated_from_clap),
        t!(advise_run::bad_setting_is_one_line),
        t!(advise_run::bad_server_addr_is_one_line),
        t!(advise_run::http_server_stall_removed_from_outside, Root, Tool("python3"), Tool("ethtool"), Tool("ss")),
        t!(advise_run::advise_run_json_is_the_versioned_document, Root, Tool("python3"), Tool("ethtool"), Tool("ss")),
        t!(advise_run::advise_run_stalls_carry_kernel_evidence, Root, Tool("python3"), Tool("ethtool"), Tool("ss")),
        t!(advise_run::advise_run_behind_an_emulated_link, Root, Tool("python3"), Tool("nsenter"), Tool("ss")),
        t!(
            advise_run::ctrl_c_early_or_late_exits_130_and_leaves_nothing,
            Root,
            Tool("python3"),
            Tool("ethtool"),
            Tool("ss")
        ),
        t!(
            advise::advise_on_a_captured_http_post_changes_the_server_only_within_a_minute,
            Root,
            Tool("python3"),
            Tool("tcpdump")
        ),
        t!(install::a_missing_tool_is_named_in_one_line, Root, Tool("ip"), Tool("iptables")),
    ]
}

fn capture_trials() -> Vec<libtest_mimic::Trial> {
    use Need::{Root, Tool};
    vec![
        t!(explain::explain_names_nagle_delayed_ack_in_seed_000),
        t!(explain::explain_json_lists_stalls_with_evidence),
        t!(explain::explain_csv_and_markdown_list_the_same_records_as_json),
        t!(explain::explain_fixed_strategy_shows_no_stalls),
        t!(explain::explain_port_filter_and_flow_filter),
        t!(explain::explain_names_the_processes_of_ptcpdumps_comments),
        t!(explain::explain_reads_a_capture_ptcpdump_wrote),
        t!(explain::explain_plot_says_to_use_report),
        t!(explain::explain_truncated_file_prints_the_valid_prefix_and_fails),
        t!(explain::explain_not_a_capture_is_a_one_line_error),
        t!(explain::explain_reads_standard_input),
        t!(explain::explain_unknown_link_type_is_a_one_line_error),
        t!(explain::explain_a_directory_says_so_once),
        t!(explain::explain_without_decodable_tcp_says_why_and_exits_1),
        t!(explain::explain_counts_application_gaps_apart_and_lists_them_on_request),
        t!(explain::explain_labels_flows_with_their_interface_only_when_the_capture_has_several),
        t!(explain_fuzz::explain_never_panics_on_damaged_captures),
        t!(explain_fuzz::explain_says_which_tunnels_it_could_not_open),
        t!(lab::seed_000_chunked_default_stalls_twice_per_round_and_the_fixes_do_not),
        t!(lab::seed_001_multi_write_waits_for_the_delayed_ack_and_nodelay_then_cork_works_here),
        t!(lab::tx_timestamps_name_the_side_that_held_the_request),
        t!(lab::seed_002_burst_of_three_stalls_on_the_third_read_and_two_does_not),
        t!(lab::seed_004_bulk_ack_does_not_stall_on_linux_with_minshall, Root),
        t!(lab::stream_reports_throughput_and_pure_acks),
        t!(lab::json_contract_has_the_documented_fields),
        t!(lab::config_file_runs_its_one_configuration),
        t!(lab::the_shipped_example_config_is_seed_000),
        t!(lab::csv_markdown_and_output_file),
        t!(lab::table_shows_rows_verdicts_and_held_options),
        t!(lab::bad_input_is_one_line_and_non_zero),
        t!(lab::an_unwritable_output_fails_before_measuring),
        t!(lab::unwritable_plot_and_pcap_fail_first),
        t!(lab::a_port_in_use_is_a_one_line_error),
        t!(lab::scenarios_lists_the_catalogue),
        t!(lab::ctrl_c_keeps_the_finished_rows_and_exits_130),
        t!(lab::side_by_side_rows_stop_at_ctrl_c_too, Root),
        t!(lab::timer_bound_rows_run_side_by_side_and_say_so, Root),
        t!(lab::wire_covers_the_measured_rounds_only),
        t!(lab::tcpext_counters_cover_the_measured_rounds_only, Root),
        t!(lab::bulk_ack_depth_2_names_the_drain_wait_after_the_measured_rounds_without_counting_it, Root),
        t!(lab::rows_carry_the_classifiers_stalls_from_their_own_packets, Root),
        t!(lab::lab_capture_on_loopback_is_a_pcapng_explain_reads, Root, Tool("tcpdump")),
        t!(lab::without_cap_net_raw_the_capture_is_skipped_with_a_note, Root, Tool("setpriv")),
        t!(lab::without_packets_the_stall_count_is_not_measured_not_zero, Root, Tool("setpriv")),
        t!(lab::behind_a_link_rows_take_their_packets_from_the_forwarders_tap, Root),
        t!(lab::an_unwritable_loopback_capture_fails_before_measuring),
    ]
}

fn model_trials() -> Vec<libtest_mimic::Trial> {
    use Need::{Root, Tool};
    vec![
        t!(link::shell_runs_the_command_in_the_client_namespace_and_returns_its_exit_code, Root),
        t!(link::shell_rejects_a_bad_link_in_one_line),
        t!(link::server_command_is_reachable_one_rtt_away, Root, Tool("python3")),
        t!(link::capture_is_readable_by_tcpdump_and_tshark, Root, Tool("python3"), Tool("tcpdump"), Tool("tshark")),
        t!(link::sigkill_leaves_no_process_of_the_run_and_the_next_run_removes_only_stale_ones, Root, Tool("setsid")),
        t!(link::sigterm_is_relayed_to_the_command, Root),
        t!(link::sigint_and_sigterm_reach_the_whole_pipeline, Root),
        t!(link::without_root_it_works_or_says_why, Root, Tool("setpriv")),
        t!(link::lab_rr_behind_rtt_20ms_shows_the_delay, Root),
        t!(link::lab_stream_behind_rate_50mbit_never_exceeds_it, Root),
        t!(link::lab_loss_and_ack_loss_counters_match_their_fractions, Root),
        t!(link::normal_exit_leaves_no_process_behind, Root),
        t!(link::a_command_that_cannot_start_exits_127_or_126_with_one_line, Root),
        t!(link::python_http_server_is_reachable_at_once_and_lookups_do_not_hang, Root, Tool("python3")),
        t!(link::unwritable_capture_fails_before_the_link_is_built),
        t!(remote::seeds_000_and_001_over_veth_reproduce_their_rows, Root, Tool("ip")),
        t!(remote::refusals_are_one_line_and_non_zero),
        t!(remote::seed_001_behind_the_emulated_link, Root),
        t!(remote::ctrl_c_on_either_end),
        t!(remote::advise_runs_against_a_remote_server),
        t!(remote::explain_merges_two_captures_of_one_connection, Root, Tool("ip"), Tool("tcpdump")),
        t!(remote::explain_pair_json_and_table_from_one_capture_twice),
        t!(link::the_links_capture_is_written_in_time_order, Root),
        t!(link::a_stream_whose_acks_are_all_lost_ends_and_says_why, Root),
        t!(report::simulate_report_renders_with_the_json_numbers, Tool("chromium")),
        t!(report::explain_report_renders_a_capture, Tool("chromium")),
        t!(report::lab_report_renders_its_rows_and_packets, Tool("chromium")),
        t!(report::unwritable_report_fails_before_any_work),
        t!(report::simulate_report_data_snapshot),
        t!(report::advise_report_draws_the_ranking_with_error_bars, Tool("chromium")),
        t!(report::replay_report_shows_the_capture_and_the_run, Tool("chromium")),
        t!(simulate::issue_example_prints_the_table),
        t!(simulate::seed_004_profiles_side_by_side_json),
        t!(simulate::trace_shows_the_first_stalled_round),
        t!(simulate::pcap_round_trips_through_explain),
        t!(simulate::depth_2_epilogue_wait_is_named_not_folded_into_ms_per_round),
        t!(simulate::help_examples_read_the_same_at_80_and_100_columns),
        t!(simulate::deterministic_output),
        t!(simulate::bad_input_is_one_line_and_nonzero),
        t!(simulate::profile_from_a_file),
        t!(simulate::mixed_profiles),
        t!(simulate::stalls_flag_lists_the_records_with_evidence),
        t!(simulate::list_profiles_shows_sources_and_unverified_values),
        t!(simulate::model_agrees_with_the_kernel),
        t!(kernel::fingerprint_measures_the_rules_in_a_private_namespace, Root),
        t!(kernel::fingerprint_twice_gives_the_same_answer),
        t!(kernel::fingerprint_table_names_the_best_profile),
        t!(kernel::model_replays_the_kernel_experiments),
        t!(kernel::era_profile_simulates_seed_002),
        t!(kernel::compare_profiles_shows_where_the_eras_differ),
        t!(kernel::here_profile_simulates_with_the_measured_rules),
        t!(kernel::kernel_formats_without_a_form_fail_at_once),
        t!(validation::huge_counts_are_refused_with_the_parameter_and_its_limit),
        t!(validation::a_config_file_with_a_huge_count_is_refused_at_its_line),
        t!(validation::a_burst_that_would_deadlock_is_refused_and_says_why),
        t!(validation::set_values_are_read_as_the_parameter_type),
        t!(validation::link_specs_that_could_be_misread_are_refused),
        t!(validation::strategy_lists_are_none_alone_or_strategies),
    ]
}

fn main() {
    let mut trials = setup_trials();
    trials.extend(capture_trials());
    trials.extend(model_trials());
    support::run(trials)
}
