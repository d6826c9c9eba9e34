"""The benchmark harness behind `bench/run` (issue 7).

Modules, in the order a run uses them:

- `env`: the machine, the commit and the tools a run records;
- `workloads`: the sizes of a quick and a full run and the fio jobs of every workload;
- `systems`: the systems under test (larch, nbdkit variants, fio on a file) and their processes;
- `fio`: fio command lines and the parser of fio's JSON output;
- `runner`: drives each workload through its systems and collects the records;
- `report`: records -> Markdown tables with ratios, and the marked section of BENCHMARKS.md;
- `svg`: hand-written SVG line and bar charts;
- `cli`: the command line of `bench/run`.

Only the Python standard library is used.
"""
