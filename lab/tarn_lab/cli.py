"""The `tarn-lab` command: list, run, report.

Owns: argument parsing and turning errors into one clear line and a non-zero exit.
Promises: Ctrl-C / SIGTERM during `run` tears everything down and keeps finished results.
Must never: hide a failure behind exit code 0.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from . import report, runner, scenario as scenario_mod
from .cleanup import sigterm_as_keyboard_interrupt
from .devices import PacerMissing
from .scenario import ScenarioError
from .shell import MissingTool


def cmd_list(args, console: Console) -> int:
    for name, path in sorted(scenario_mod.available().items()):
        s = scenario_mod.load(str(path))
        stacks = ", ".join(st["name"] for st in s["stacks"])
        console.print(f"[bold]{name}[/bold]: {s.get('title', '')}\n    stacks: {stacks}\n"
                      f"    workloads: {', '.join(report.workload_label(w) for w in s['workloads'])}")
    return 0


def cmd_run(args, console: Console) -> int:
    scenario = scenario_mod.load(args.scenario, full=args.full)
    if args.out:
        rundir = Path(args.out)
    elif args.resume:
        rundir = runner.latest_rundir(scenario["name"]) or runner.default_rundir(scenario)
    else:
        rundir = runner.default_rundir(scenario)
    console.print(f"tarn-lab: scenario [bold]{scenario['name']}[/bold] ({scenario['size_class']} sizes) -> {rundir}")
    sigterm_as_keyboard_interrupt()
    runner.run_scenario(scenario, rundir, console)
    return finish_report(rundir, console)


def finish_report(rundir: Path, console: Console) -> int:
    report.print_terminal(rundir, console)
    out = report.write_html(rundir)
    _, runs, _ = report.load_results(rundir)
    console.print(f"HTML report: {out}")
    return 0 if runs else 1


def cmd_report(args, console: Console) -> int:
    rundir = Path(args.run)
    if not (rundir / "scenario.json").exists():
        latest = runner.latest_rundir(args.run)
        if latest is None:
            raise ScenarioError(f"{args.run}: not a results directory (no scenario.json)")
        rundir = latest
    return finish_report(rundir, console)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tarn-lab", description="Database benchmarks on storage stacks over one emulated cloud disk")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the shipped scenarios")
    p = sub.add_parser("run", help="run a scenario (quick sizes unless --full)")
    p.add_argument("scenario", help="a shipped scenario name or a .toml file")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="quick sizes for a small machine (default)")
    size.add_argument("--full", action="store_true", help="the article's full sizes")
    p.add_argument("--out", help="results directory (re-using one skips its finished runs)")
    p.add_argument("--resume", action="store_true", help="continue the latest results directory of this scenario")
    p = sub.add_parser("report", help="print the table and write the HTML report of a results directory")
    p.add_argument("run", help="results directory (or a scenario name: its latest run)")
    args = parser.parse_args(argv)
    console = Console()
    if not console.is_terminal:
        # Piped or in CI: rich would fold the tables to 80 columns; logs are wide enough.
        console = Console(width=150)
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
