"""tarn-lab: database benchmarks on many storage stacks over one emulated cloud disk.

Owns nothing by itself; see the modules: scenario (files), stacks/devices (what is built),
mariadb/sysbench (what runs), metrics/sizes (what is measured), runner (orchestration),
report (what is shown). Must never leave mounts, loop devices or servers behind.
"""
__version__ = "0.1.0"
