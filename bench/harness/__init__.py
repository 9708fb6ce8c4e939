"""The side-by-side benchmark harness: servers, peer virtualenvs, the adapter protocol,
the workloads of /work/shared/spec/BENCHMARKS.md, and the report. Entry point:
``bench/run.py``."""
