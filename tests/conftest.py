"""The test process splits its CPU into four logical devices before TensorFlow starts, so that
multi-device (ring) training runs here without GPUs; everything else uses /CPU:0 as before."""

import pytest
import tensorflow as tf

from ngra_tf.parallel.ring import split_cpu

split_cpu(4)
# The ring tests count on exactly these devices; fail at collection, not later, if TF started first.
assert len(tf.config.list_logical_devices("CPU")) == 4, tf.config.list_logical_devices("CPU")


# The default suite (`make test`, <= 10 minutes on 2 cores) keeps one representative of each equality class
# of the matrices below; `make test-slow` runs the rest, and the tests named in SLOW (CI runs both suites).
# THINNED: a parametrized test's node id (without parameters) -> the parameter ids the default suite keeps.
THINNED = {
    # train.py with a recipe (every recipe in test-slow)
    "tests/layers/test_training.py::test_example_train_once_on_synthetic_preset": {"gcn"},
    # store configurations (P, format, spill policy, host tier), each with another model (gcn at P = 4 with the
    # host tier on disk stays; HDF5 stores: test_store)
    "tests/runtime/test_stream.py::test_streamed_training_equals_in_memory": {"gcn-4-npy-recompute-disk"},
    # training over two devices equals one device's (every model, placement and store in test-slow)
    "tests/parallel/test_ring.py::test_ring_training_equals_one_device": {"ggcn-2"},
    # a max model at P > 1 (a sum model at P > 1: test_stream's gcn-4; every model at P > 1: test_models;
    # attention at P > 1: test_models' test_gat_matches_dense_formula)
    "tests/compiler/test_compiler_invariance.py::test_outputs_and_gradients_match_one_chunk": {"mpgcn-3"},
    "tests/compiler/test_compiler_rewrites.py::test_custom_layers_match_their_direct_run_at_every_chunk_count": {
        "PerFeatureWeight-per_feature"},
    # random edge code: a program, an attention, a reduce against numeric gradients
    "tests/compiler/test_edge_code.py::test_random_edge_stages_fuse_and_equal_the_unfused_path": {"4-sum|max"},
    "tests/compiler/test_edge_code.py::test_random_attention_streams_and_equals_the_unfused_softmax": {"0"},
    "tests/compiler/test_edge_code.py::test_edge_code_gradients_equal_numeric_ones": {"1-softmax"},
    # the gradient walks' tile sums: several whole tiles and a partial one (float64: 64 a tile), winners' seeds
    "tests/ops/test_generated.py::test_tiles_summed_over_a_segment_equal_the_interpreter_and_the_unfused_path": {
        "float64-max"},
    # adjoints that do not pass, for an infinite upstream (relu's and abs's products; maximum's and minimum's
    # selects: slow)
    "tests/ops/test_generated.py::test_adjoints_that_do_not_pass_treat_an_infinite_upstream_as_tensorflow_does": {
        "relu", "abs"},
    "tests/layers/test_graph_model.py::test_save_and_load_round_trip": {"gcn"},
    # (attention dropout at several P: test_models' test_gat_attention_dropout_is_keras_dropout_of_the_weights)
    "tests/graph/test_propagation_invariant.py::test_chunks_reassemble_the_whole_graph": {
        "power_law-5", "isolated-3", "uniform-2", "tiny-1"},
    "tests/compiler/test_compiler_invariance.py::test_identity_order_partition_matches": {"mpgcn"},
    "tests/compiler/test_compiler_columns.py::test_columns_chain_through_init": {"mpgcn"},
    "tests/compiler/test_compiler_rewrites.py::test_hoisting_removes_every_edge_stage_matmul": {"ggnn-1"},
    "tests/compiler/test_compiler_invariance.py::test_schedules_give_bitwise_equal_results": {"mpgcn"},
    "tests/layers/test_new_layers.py::test_outputs_and_gradients_do_not_depend_on_chunks_or_rewrites": {
        "sage-max-normalize"},
    "tests/layers/test_training.py::test_example_times_every_epoch": {"4"},
    "tests/layers/test_sparse_features.py::test_sparse_features_train_like_dense": {"gcn-csr-P1"},
}
SLOW = {
    "tests/runtime/test_sparse_store.py::test_csr_store_over_several_devices",
    "tests/runtime/test_sparse_store.py::test_csr_rows_in_many_tiles_train_like_the_dense_store",
    "tests/runtime/test_sparse_store.py::test_train_py_trains_from_cora_with_csr_features",
    "tests/layers/test_released_models.py::test_models_built_and_dropped_in_a_loop_do_not_accumulate",
    "tests/compiler/test_compiler_rewrites.py::test_compiled_layers_train_inside_keras_fit",
    "tests/runtime/test_stream.py::test_callbacks_and_save_load_refer_to_the_store",
    "tests/runtime/test_stream_ring.py::test_source_rows_cross_from_the_host_once_per_route",
    "tests/runtime/test_stream_ring.py::test_the_budget_is_per_device",
    "tests/graph/test_graph_properties.py::test_views_and_partition_invariants",
    "tests/tools/test_bench_models.py::test_cora",
    "tests/runtime/test_functional_models.py::test_tf_function_gradients_of_a_functional_model_match_plain_keras",
    "tests/tools/test_bench_models.py::test_sage_and_gin_rows_against_both_peers",
    "tests/tools/test_bench_kernels.py::test_smallest_case_table_and_plot",
    "tests/tools/test_bench_models.py::test_user_written_variants_table",
    "tests/tools/test_bench_models.py::test_programs_against_edge_code",
    "tests/parallel/test_cluster.py::test_bad_cluster_flags",
    # the harness fixture compiles every CUDA source (minutes on a fresh clone); `make cuda-check` runs it too
    "tests/ops/test_cuda_harness.py::test_emulated",
    "tests/ops/test_cuda_harness.py::test_gpu",
    "tests/ops/test_cuda_harness.py::test_bad_usage_is_refused",
    "tests/layers/test_profile.py::test_profile_trace_has_the_stage_names",
    "tests/runtime/test_stream.py::test_spill_and_recompute_give_the_same_result",
    "tests/layers/test_profile.py::test_trace_summary_reads_the_profile",
    "tests/parallel/test_ring.py::test_every_placement_trains_every_model_alike",
    "tests/parallel/test_ring.py::test_explain_and_save_load",
    "tests/tools/test_bench_models.py::test_unknown_system_model_or_graph_is_refused",
    "tests/tools/test_simulate_ring.py::test_bad_flags_give_one_error_line_and_no_traceback",
    "tests/tools/test_bench_models.py::test_ablation_alone",
    "tests/tools/test_bench_models.py::test_main_table_and_table_2_layout",
    "tests/parallel/test_cluster.py::test_ring_across_two_workers_equals_one_device",
    "tests/parallel/test_cluster.py::test_a_lost_worker_ends_training_with_one_line_and_the_run_resumes",
    "tests/parallel/test_cluster.py::test_worker_and_train_py_faults_on_the_command_line",
    # (a fresh clone's make test reached 10:25; the default suite keeps the in-process faces of these)
    "tests/parallel/test_ring.py::test_each_interval_crosses_from_the_host_once_per_route",
    "tests/tools/test_bench_streaming.py::test_schedules_and_neugraph",
    "tests/tools/test_bench_cuda.py::test_library_builds_and_loads",
    "tests/runtime/test_faults.py::test_train_py_names_a_spill_write_that_fails",
    "tests/layers/test_training.py::test_example_chunks_schedule_and_rewrites_do_not_change_training",
    # (devices equal one device in the default suite through test_ring_training_equals_one_device's ggcn-2)
    "tests/parallel/test_ring.py::test_steps_run_on_the_devices_that_own_them",
    # (the default suite keeps the hand-written corruptions of test_store_integrity, index arrays included)
    "tests/runtime/test_store_fuzz.py::test_corrupted_stores_fail_by_name_or_read_correctly",
    "tests/parallel/test_train_devices.py::test_devices_train_like_one_device_and_report_traffic",
    "tests/ops/test_fuzz.py::test_absurd_sizes_fail_cleanly",
    "tests/ops/test_fuzz.py::test_raw_ops_never_crash_on_malformed_input",
    # (a fresh clone's make test took 12:07 on 2026-11-28, on a machine 1.4-1.5x slower than the day before; the
    # default suite keeps what each covers: reads against the plan's least in
    # test_train_py_reports_what_each_epoch_read_against_the_plans_least, training under a budget and refusing
    # one too small in the README's store block (Cora's CSR store), max / min across columns in
    # test_compiler_invariance's mpgcn-3, CSR features equal to dense ones in test_sparse_features, and the
    # guide's stores in the README's store block)
    "tests/runtime/test_stream.py::test_the_chunk_cache_reads_the_least_the_schedule_needs",
    "tests/runtime/test_stream.py::test_train_py_stays_within_the_smallest_budget_it_accepts",
    "tests/runtime/test_partition_graph_tool.py::test_the_p_a_budget_gives_trains_under_that_budget",
    "tests/runtime/test_sparse_store.py::test_training_from_csr_equals_the_dense_store",
    "tests/compiler/test_compiler_columns.py::test_negative_max_min_columns_match_dense",
    "tests/test_readme.py::test_readme_block[docs/guide/stores.md@36]",
    "tests/test_readme.py::test_readme_block[docs/guide/stores.md@123]",
    # (a fresh clone's make test took 9:41 on 2026-11-28 with a warm kernel cache; the suite alone ran 7:27 with a
    # cold one (CI's) against 6:20 warm, so 9-10 minutes with the install: the default suite keeps the module
    # cache's use by every generated-code test, and the guides' edge-code and store blocks; the guides' other
    # blocks are marked slow where they stand)
    "tests/ops/test_generated_cuda.py::test_a_module_is_cached_per_program_and_arch",
    # (a fresh clone's make test took 11:56 on 2026-11-29 on an AMD EPYC Zen 3, 3:19 of it installing and
    # building; the default suite keeps: P > 1 through test_compiler_invariance's mpgcn-3 and the streamed
    # gcn-4-npy-recompute-disk, the schedules through test_compiler_invariance's mpgcn, attention dropout in
    # test_models' test_gat_attention_dropout_is_keras_dropout_of_the_weights, save and load in test_graph_model,
    # Cora in test_gcn_on_cora_learns, the emulated CUDA walks in `make cuda-check` and the slow suite)
    "tests/ops/test_generated_cuda.py::test_generated_programs_equal_the_cpu_walks_under_emulation",
    "tests/runtime/test_faults.py::test_a_spill_directory_made_for_one_model_stays_while_another_uses_it",
    "tests/compiler/test_compiler_rewrites.py::test_hoisting_alone_keeps_results",
    "tests/runtime/test_stream.py::test_without_overlap_steps_run_one_at_a_time_and_train_alike",
    "tests/runtime/test_stream.py::test_a_host_device_copies_nothing",
    "tests/runtime/test_stream.py::test_selective_scheduling_gives_the_same_result",
    "tests/runtime/test_stream.py::test_attention_dropout_trains_alike_from_a_store_and_in_memory_whatever_the_chunking",
    "tests/runtime/test_functional_models.py::test_dropout_draws_do_not_change_with_p",
    "tests/runtime/test_functional_models.py::test_save_and_load",
    "tests/layers/test_training.py::test_example_history_json",
    "tests/layers/test_training.py::test_example_on_cora",
    "tests/layers/test_graph_model.py::test_only_masked_vertices_train",
    "tests/tools/test_simulate_ring.py::test_a_small_run_with_measured_compute_writes_json",
    "tests/tools/test_simulate_ring.py::test_a_store_sets_p_the_chunk_bytes_and_the_tile_compute",
    # (then 10:16; and: a dropped model's release in test_released_models' loop, a Cora GCN in
    # test_gcn_on_cora_learns rather than the README's Keras block, which is marked slow where it stands)
    "tests/layers/test_released_models.py::test_a_dropped_model_leaves_nothing_registered",
    "tests/runtime/test_stream.py::test_dropout_draws_are_replayed_in_backward",
    "tests/layers/test_new_layers.py::test_saved_model_loads_with_the_new_layers",
    "tests/runtime/test_faults.py::test_train_py_refuses_chunks_other_than_the_stores_in_one_line",
    # (2026-11-29: a fresh clone's make test took 14:23 here and in CI, 4:28 of it installing and building, on
    # machines 1.5x slower than the day before; the suite must run in 5:30. The default suite keeps, for what
    # moved: streamed training in test_stream's gcn-4-npy-recompute-disk and its cheap checks, the schedules'
    # bitwise equality in test_compiler_invariance's mpgcn, killed processes in test_store_integrity's killed
    # conversion, faults in test_faults' spill directories and damaged store, the README's SAGA
    # block, a cluster in test_cluster's cheaper checks, the converter's errors in test_convert; the trims above
    # thinned further. Every moved test, and every matrix, runs in make test-slow.)
    "tests/test_readme.py::test_readme_block[README.md@165]",
    "tests/test_readme.py::test_readme_block[docs/guide/saga-layers.md@153]",
    "tests/test_readme.py::test_readme_block[docs/guide/stores.md@54]",
    "tests/runtime/test_faults.py::test_train_py_stopped_by_a_signal_removes_its_spill_files",
    "tests/runtime/test_faults.py::test_a_store_file_replaced_while_training_stops_it",
    "tests/runtime/test_stream.py::test_train_py_reports_what_each_epoch_read_against_the_plans_least",
    "tests/tools/test_bench_cuda.py::test_case_orchestration",
    "tests/layers/test_resume.py::test_an_interrupted_fit_resumes_with_the_losses_of_an_uninterrupted_one",
    "tests/runtime/test_convert_faults.py::test_a_conversion_killed_outright_is_replaced_by_running_it_again",
    "tests/runtime/test_partition_graph_tool.py::test_conversion_stays_within_a_small_fraction_of_the_graph",
    "tests/tools/test_simulate_ring.py::test_bad_store_flags_give_one_error_line[flags1---store measures what "
    "--compute_ms would set]",
    "tests/parallel/test_cluster.py::test_a_worker_listens_only_on_its_own_address",
    "tests/runtime/test_partition_graph_tool.py::test_bad_input_exits_1_with_a_message_and_no_output",
    "tests/runtime/test_functional_models.py::test_every_mode_trains_like_memory_at_p1",
    "tests/runtime/test_stream_ring.py::test_ring_streamed_training_equals_in_memory",
    "tests/runtime/test_stream.py::test_every_schedule_streams_like_in_memory",
    "tests/ops/test_prepare_graph.py::test_training_with_plans_equals_training_without",
}
# The files that take longest start first: xdist hands out files in collection order, and one of these
# started last would leave the other worker idle (the default suite's last minutes on 2 cores). The CUDA
# harness's compile (every CUDA source with nvcc: 10 minutes of the slow suite) first of all: it ran last.
LONGEST_FIRST = ("tests/ops/test_cuda_harness.py", "tests/tools/test_bench_models.py",
                 "tests/runtime/test_stream.py", "tests/test_readme.py", "tests/runtime/test_functional_models.py",
                 "tests/compiler/test_compiler_invariance.py", "tests/layers/test_training.py",
                 "tests/compiler/test_compiler_rewrites.py", "tests/runtime/test_faults.py",
                 "tests/layers/test_graph_model.py")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by mark
def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))  # stable: in-file order kept
    seen = {}
    for item in items:
        base, _, params = item.nodeid.partition("[")
        params = params.rstrip("]")
        seen.setdefault(base, set()).add(params)
        keep = THINNED.get(base)
        if base in SLOW or item.nodeid in SLOW or (keep is not None and params not in keep):
            item.add_marker(pytest.mark.slow)
    if any("::" in arg for arg in config.args):
        return  # cases picked by id: the checks below are for whole files
    ids = {item.nodeid for item in items}
    for case in SLOW:  # a moved README block must not leave SLOW naming nothing
        if "[" in case and case.partition("[")[0] in seen and case not in ids:
            raise pytest.UsageError(f"conftest.SLOW names {case}, which is not collected")
    for base, keep in THINNED.items():  # a renamed case must not leave its class out of the default suite
        if base in seen and not keep <= seen[base]:
            raise pytest.UsageError(f"conftest.THINNED keeps {sorted(keep - seen[base])} of {base}, "
                                    f"which has no such cases: {sorted(seen[base])}")
