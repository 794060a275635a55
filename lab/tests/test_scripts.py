"""The shell glue a new user meets first: apt's output goes to a log (shown only when apt
fails) while progress lines say where it is; a compiler warning fails the test run."""
import os
import subprocess
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"

# rustc's own format, as cargo prints it (the unused_mut warning of crates/pool/tests/smoke.rs).
WARNING = """\
   Compiling tarn-pool v0.1.0 (/work/crates/pool)
warning: variable does not need to be mutable
  --> crates/pool/tests/smoke.rs:41:9
   |
41 |     let mut pool = Pool::create(&dir).unwrap();
   |         ----^^^^
   |         |
   |         help: remove this `mut`
   |
   = note: `#[warn(unused_mut)]` on by default

warning: `tarn-pool` (test "smoke") generated 1 warning (run `cargo fix --test "smoke"` to apply 1 suggestion)
    Finished `release` profile [optimized + debuginfo] target(s) in 1m 02s
     Running tests/smoke.rs (target/release/deps/smoke-0f1e2d)
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.20s
"""
CLEAN = """\
   Compiling tarn-pool v0.1.0 (/work/crates/pool)
    Finished `release` profile [optimized + debuginfo] target(s) in 1m 02s
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.20s
"""


def check_warnings(tmp_path, text):
    log = tmp_path / "cargo.log"
    log.write_text(text)
    return subprocess.run(["bash", str(SCRIPTS / "check-warnings.sh"), str(log)], capture_output=True, text=True)


def test_a_clean_test_build_passes_the_warning_check(tmp_path):
    proc = check_warnings(tmp_path, CLEAN)
    assert proc.returncode == 0 and proc.stdout.strip() == "warnings: none"


def test_a_compiler_warning_fails_the_check_and_says_where(tmp_path):
    proc = check_warnings(tmp_path, WARNING)
    assert proc.returncode == 1
    assert "crates/pool/tests/smoke.rs:41:9" in proc.stdout and "unused_mut" in proc.stdout
    assert "FAILURE: the build printed 1 compiler warning(s)" in proc.stdout
    assert "generated 1 warning" not in proc.stdout     # the tally is not counted as a warning


FAKE_DPKG_QUERY = "#!/bin/sh\nexit 1\n"   # nothing is installed
FAKE_APT_GET = """#!/bin/bash
if [ "$1" = update ]; then echo "Hit:1 http://deb.debian.org/debian bookworm InRelease"; exit 0; fi
echo "Reading package lists..."
echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
for p in 5 12 47 88 100; do echo "pmstatus:fakepkg:$p.0:Installing fakepkg" >&3; done
echo "Setting up fakepkg (1.0) ..."
exit ${FAKE_APT_RC:-0}
"""


def fake_apt(tmp_path, rc: int):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("dpkg-query", FAKE_DPKG_QUERY), ("apt-get", FAKE_APT_GET)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_APT_RC": str(rc),
           "TARN_SETUP_LOG_DIR": str(tmp_path / "logs"), "TARN_POLICY_RC_D": str(tmp_path / "policy-rc.d")}
    env.pop("TARN_SETUP_T0", None)
    return subprocess.run(["bash", str(SCRIPTS / "apt-install.sh"), "fakepkg"], capture_output=True,
                          text=True, env=env, timeout=60)


def test_apt_output_goes_to_a_log_and_progress_lines_say_where_it_is(tmp_path):
    proc = fake_apt(tmp_path, 0)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    log = next((tmp_path / "logs").glob("apt-*.log"))
    assert f"apt's output: {log}" in out
    assert "System has not been booted" not in out + proc.stderr      # the noise stays in the log
    assert "System has not been booted" in log.read_text()
    assert "apt: installing 47% (Installing fakepkg)" in out and "apt: installing 100%" in out
    assert out.splitlines()[-1].endswith("installed: fakepkg")
    assert all(line.startswith("[setup +") for line in out.splitlines())
    assert not (tmp_path / "policy-rc.d").exists(), "the no-services policy is removed afterwards"


def test_a_failing_apt_shows_its_whole_log(tmp_path):
    proc = fake_apt(tmp_path, 100)
    assert proc.returncode == 1
    assert "System has not been booted" in proc.stderr and "Setting up fakepkg" in proc.stderr
    assert "FAILED: apt-get install fakepkg" in proc.stderr


LAB = Path(__file__).resolve().parents[1]


def test_lab_test_sh_fails_when_pytest_collects_nothing():
    """pytest's exit 5 ("no tests collected") must not pass CI: a suite that silently tests
    nothing is a failure. Runs lab/test.sh itself with a filter that matches no test."""
    proc = subprocess.run(["bash", str(LAB / "test.sh"), "-q", "-k", "no_test_is_named_like_this_xyz",
                           "tests/test_sizes.py"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "FAILURE: pytest collected no tests (exit 5)" in proc.stderr


def test_the_mount_benchmark_refuses_an_unknown_transport_by_name():
    bench = Path(__file__).resolve().parents[2] / "bench" / "mount.sh"
    proc = subprocess.run(["bash", str(bench), "--transport", "pigeon"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--transport takes dev, uring or both, not 'pigeon'" in proc.stderr


def test_the_fsync_benchmark_refuses_an_unknown_transport_and_bad_seconds():
    bench = Path(__file__).resolve().parents[2] / "bench" / "fsync.sh"
    proc = subprocess.run(["bash", str(bench), "10", "--transport", "pigeon"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--transport takes dev or uring, not 'pigeon'" in proc.stderr
    proc = subprocess.run(["bash", str(bench), "ten"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "usage: bash bench/fsync.sh [SECONDS] [--transport dev|uring]" in proc.stderr


def test_the_mount_benchmark_refuses_unknown_settings_by_name():
    bench = Path(__file__).resolve().parents[2] / "bench" / "mount.sh"
    proc = subprocess.run(["bash", str(bench), "--settings", "tuned"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--settings takes recommended or same, not 'tuned'" in proc.stderr


def test_the_saturated_disk_benchmark_refuses_a_duration_that_is_not_seconds():
    bench = Path(__file__).resolve().parents[2] / "bench" / "saturated.sh"
    for bad in ("90s", "0", "-5"):
        proc = subprocess.run(["bash", str(bench), bad], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert "usage: bash bench/saturated.sh [SECONDS]" in proc.stderr
