"""Benchmarks (run as scripts: bench/bench.py, bench/bench_families.py, bench/bench_train.py); a package so that
bench_families can import bench.bench's helpers."""
