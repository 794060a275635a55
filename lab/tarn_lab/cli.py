"""The `tarn-lab` command: list, run (--size quick|medium|full, --only, --load-only),
report (and report --compare BEFORE AFTER).

Owns: argument parsing and turning errors into one clear line and a non-zero exit.
Promises: Ctrl-C / SIGTERM during `run` tears everything down and keeps finished results;
the answer (headline, ratio table) comes first, detail only with --verbose; a stack whose
caches exceed dataset/4 is said before anything runs.
Must never: hide a failure behind exit code 0.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

from rich.console import Console

from . import compare, html_report, report, runner, scenario as scenario_mod
from .budget import CacheCheck
from .cleanup import sigterm_as_keyboard_interrupt
from .humanize import describe_load, workload_label
from .progress import human_duration
from .devices import PacerMissing
from .scenario import ScenarioError
from .shell import MissingTool


def cmd_list(args, console: Console) -> int:
    for name, path in sorted(scenario_mod.available().items()):
        s = scenario_mod.load(str(path))
        stacks = ", ".join(st["name"] for st in s["stacks"])
        sizes = ", ".join(scenario_mod.sizes_of(scenario_mod.raw(str(path))))
        console.print(f"[bold]{name}[/bold]: {s.get('title', '')}\n    stacks: {stacks}\n"
                      f"    workloads: {', '.join(workload_label(w) for w in s['workloads'])}\n    sizes: {sizes}")
    return 0


def size_of(args) -> str:
    """--size, or its aliases --quick / --full; quick when none is given."""
    if args.full:
        return "full"
    return args.size or "quick"


def only_stacks(scenario: dict, names: str | None) -> dict:
    """The scenario with just the stacks named (comma-separated), in its own order."""
    if not names:
        return scenario
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = [s["name"] for s in scenario["stacks"]]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ScenarioError(f"--only: no stack {', '.join(unknown)} in {scenario['name']} ({', '.join(known)})")
    # What was said about the others (caches against the dataset) is not about this run.
    return {**scenario, "stacks": [s for s in scenario["stacks"] if s["name"] in wanted],
            "cache_checks": [c for c in scenario.get("cache_checks", []) if c["stack"] in wanted],
            "warnings": [w for w in scenario.get("warnings", []) if w.split(":", 1)[0] in wanted]}


def cmd_run(args, console: Console) -> int:
    scenario = only_stacks(scenario_mod.load(args.scenario, size=size_of(args)), args.only)
    if args.out:
        rundir = Path(args.out)
    elif args.resume:
        rundir = runner.latest_rundir(scenario["name"]) or runner.default_rundir(scenario)
    else:
        rundir = runner.default_rundir(scenario)
    console.print(f"tarn-lab: scenario [bold]{scenario['name']}[/bold] ({scenario['size_class']} sizes) -> {rundir}",
                  soft_wrap=True)
    checks = scenario_mod.cache_warning([CacheCheck(**c) for c in scenario.get("cache_checks", [])])
    for warning in ([checks] if checks else []) + scenario.get("warnings", []):
        console.print(f"[bold yellow]WARNING[/bold yellow] {warning}", soft_wrap=True, highlight=False)
    sigterm_as_keyboard_interrupt()
    started = time.monotonic()
    runner.run_scenario(scenario, rundir, console, load_only=args.load_only)
    # What the lab itself cost (its own process: progress display, sampling, parsing), so
    # a user can see it does not compete with what it measures.
    used = resource.getrusage(resource.RUSAGE_SELF)
    console.print(f"tarn-lab: ran for {human_duration(time.monotonic() - started)}; the lab's own process used "
                  f"{used.ru_utime + used.ru_stime:.1f} s of CPU", soft_wrap=True, highlight=False)
    if args.load_only:
        return print_loads(rundir, console)
    return finish_report(rundir, console, args.verbose)


def print_loads(rundir: Path, console: Console) -> int:
    """After --load-only: how each stack got its data and how long it took; 0 if all loaded."""
    _, _, stacks = report.load_results(rundir)
    for s in stacks:
        if s.get("status") == "ok":
            console.print(f"{s['stack']}: {describe_load(s.get('dataset') or {})}", soft_wrap=True, highlight=False)
        else:
            console.print(f"[yellow]{s['stack']}: {s.get('status')}: {s.get('reason')}[/yellow]", soft_wrap=True)
    return 0 if stacks and all(s.get("status") == "ok" for s in stacks) else 1


def finish_report(rundir: Path, console: Console, verbose: bool = False) -> int:
    report.print_terminal(rundir, console, verbose=verbose)
    out = html_report.write_html(rundir)
    _, runs, _ = report.load_results(rundir)
    console.print(f"HTML report: {out}", soft_wrap=True)
    return 0 if runs else 1


def results_dir(name: str) -> Path:
    """A results directory, or a scenario name for its latest one."""
    rundir = Path(name)
    if (rundir / "scenario.json").exists():
        return rundir
    latest = runner.latest_rundir(name)
    if latest is None:
        raise ScenarioError(f"{name}: not a results directory (no scenario.json)")
    return latest


def cmd_report(args, console: Console) -> int:
    if args.compare:
        before, after = (results_dir(n) for n in args.compare)
        compare.print_compare(before, after, console)
        console.print(f"HTML comparison: {compare.write_compare_html(before, after)}", soft_wrap=True)
        return 0
    if not args.run:
        raise ScenarioError("report: give a results directory, or --compare BEFORE AFTER")
    return finish_report(results_dir(args.run), console, args.verbose)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tarn-lab", description="Database benchmarks on storage stacks over one emulated cloud disk")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the shipped scenarios")
    p = sub.add_parser("run", help="run a scenario (quick sizes unless --size says otherwise)")
    p.add_argument("scenario", help="a shipped scenario name or a .toml file")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--size", choices=scenario_mod.SIZE_CLASSES,
                      help="quick (default: minutes, caches may hold the data), medium (real sizes that fit "
                           "a 2-core, 24 GiB machine in about an hour: every dataset ≥ 4× each stack's caches), "
                           "full (the articles' sizes)")
    size.add_argument("--quick", action="store_true", help="the same as --size quick")
    size.add_argument("--full", action="store_true", help="the same as --size full")
    p.add_argument("--only", metavar="STACK[,STACK]", help="run only these stacks of the scenario")
    p.add_argument("--load-only", action="store_true",
                   help="build each stack and load the data, record how long the load took, run nothing")
    p.add_argument("--out", help="results directory (re-using one skips its finished runs)")
    p.add_argument("--resume", action="store_true", help="continue the latest results directory of this scenario")
    p.add_argument("-v", "--verbose", action="store_true", help="after the answer: sysbench's tables, devices, settings")
    p = sub.add_parser("report", help="print the answer and write the HTML report of a results directory")
    p.add_argument("run", nargs="?", help="results directory (or a scenario name: its latest run)")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                   help="two results directories side by side (before/after a change)")
    p.add_argument("-v", "--verbose", action="store_true", help="after the answer: sysbench's tables, devices, settings")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    if not console.is_terminal:
        # Piped or in CI: rich would fold the tables to 80 columns; the answer fits 100.
        console = Console(width=100)
    try:
        return {"list": cmd_list, "run": cmd_run, "report": cmd_report}[args.command](args, console)
    except (ScenarioError, MissingTool, PacerMissing, RuntimeError) as exc:
        console.print(f"[red]tarn-lab: {exc}[/red]")
        return 2
    except KeyboardInterrupt:
        console.print("[red]tarn-lab: interrupted; everything started was torn down, finished results kept[/red]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
