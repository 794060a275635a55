"""tarn-lab: database benchmarks on many storage stacks over one emulated cloud disk.

Owns nothing by itself; see the modules: scenario (files), stacks/devices (what is built),
mariadb/postgres/sysbench (what runs), metrics/sizes (what is measured), runner
(orchestration) and progress (what the user sees meanwhile), analysis (every derived
number: per-transaction I/O, ratios, headline, verdict), report/html_report/plots/compare
(what is shown) with humanize (the words and units). Must never leave mounts, loop devices
or servers behind.
"""
__version__ = "0.1.0"
