#!/usr/bin/env python3
"""Runs every test binary of the workspace, several at a time.

`cargo test --workspace` runs its test binaries one after another, each with as many test
threads as cores. Most of tinymq's tests wait on sockets, child processes and fsyncs rather
than on the CPU, and a few binaries (the Kafka suites, the chaos run) take minutes with only
two tests each, so one after another leaves the machine idle for most of the run. This
script builds the tests once (`cargo test --no-run`), then runs the binaries in a pool of
`TINYMQ_TEST_JOBS` (default: cores + 1), longest first, each in its package's folder with
the environment cargo would give it, plus the doc tests, run first on their own.

    scripts/run-tests.py [CARGO_ARGS...] [-- TEST_ARGS...]

CARGO_ARGS go to `cargo test --no-run` (for example `-p tinymq-broker` or `--release`);
TEST_ARGS go to every test binary (a name filter, `--nocapture`). Every binary runs to the
end whatever the others do (cargo's `--no-fail-fast`, which is accepted and ignored). Each
binary's output is kept in target/test-logs/; a failed binary's output is printed in full.
Each binary's duration is kept in target/test-durations.json, so the next run starts the
longest first; a fresh checkout uses the list in LONGEST below. A binary still running after
`TINYMQ_TEST_BINARY_TIMEOUT_SECONDS` (default 900) is killed with its whole process group and
counts as failed, its output printed (libtest names each test running for over 60 s), so one
hung test fails the run with its name instead of using up CI's budget in silence.
"""

import json
import os
import signal
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# Known long binaries (package, target, kind), slowest first, for a run with no recorded durations.
LONGEST = [
    ("tinymq-cli", "kafka_conformance", "test"),
    ("tinymq-cli", "kafka_connect", "test"),
    ("tinymq-cli", "kafka_mirror", "test"),
    ("tinymq-chaos", "short", "test"),
    ("tinymq-cli", "group_promises", "test"),
    ("tinymq-cli", "replication", "test"),
    ("tinymq-cli", "delayed", "test"),
    ("tinymq-cli", "in_process", "test"),
    ("tinymq-cli", "kafka_clients_million", "test"),
    ("tinymq-cli", "console_browser", "test"),
]
DOC_TESTS = ("(workspace)", "doc tests", "doc")


def split_args(argv):
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def build(cargo, cargo_args):
    """Builds every test binary; returns [(package, target, kind, executable, package_dir)]."""
    args = [a for a in cargo_args if a != "--no-fail-fast"]
    command = [cargo, "test", "--no-run", "--message-format=json-render-diagnostics"] + args
    print("== " + " ".join(command), flush=True)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    binaries = []
    for line in process.stdout:
        if not line.startswith("{"):
            sys.stdout.write(line)
            continue
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact":
            continue
        if not message.get("profile", {}).get("test") or not message.get("executable"):
            continue
        target = message["target"]
        package = package_name(message)
        binaries.append(
            (
                package,
                target["name"],
                target["kind"][0],
                message["executable"],
                os.path.dirname(message["manifest_path"]),
            )
        )
    if process.wait() != 0:
        sys.exit("cargo test --no-run failed")
    return binaries


def package_name(message):
    """The package's name, from the artifact's package id (either of cargo's two forms)."""
    package_id = message["package_id"]
    if "#" in package_id:  # path+file:///…/crates/log#tinymq-log@0.1.0
        tail = package_id.split("#", 1)[1]
        name = tail.split("@", 1)[0]
        if name and not name[0].isdigit():
            return name
        return os.path.basename(package_id.split("#", 1)[0])
    return package_id.split(" ", 1)[0]  # tinymq-log 0.1.0 (path+file:///…)


def rustup_toolchain():
    """The toolchain rustup chose for this run, as cargo's proxy passes it to a test (tests
    that run cargo, e.g. to build the `tinymq` binary, must not pick another one up from a
    dependency's own rust-toolchain file, which rustup reads from rustc's working folder)."""
    if os.environ.get("RUSTUP_TOOLCHAIN") or not shutil.which("rustup"):
        return os.environ.get("RUSTUP_TOOLCHAIN")
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True)
    if sysroot.returncode != 0:
        return None
    return os.path.basename(sysroot.stdout.strip()) or None


def order(jobs, durations):
    """Longest first: by recorded duration, else by LONGEST; binaries never seen before last."""
    hint = {key: len(LONGEST) - i for i, key in enumerate(LONGEST)}

    def weight(job):
        key = job["key"]
        recorded = durations.get("::".join(key))
        if recorded is not None:
            return (1, recorded)
        return (1, 1000.0 + hint[key]) if key in hint else (0, 0.0)

    return sorted(jobs, key=weight, reverse=True)


BINARY_TIMEOUT_SECONDS = float(os.environ.get("TINYMQ_TEST_BINARY_TIMEOUT_SECONDS", "900"))


def call_bounded(job, log):
    """Runs the job's command in a process group of its own; kills the group (the binary and
    every server it started) once it has run for BINARY_TIMEOUT_SECONDS. Returns its exit code,
    or None when it was killed for taking too long."""
    process = subprocess.Popen(
        job["command"], cwd=job["cwd"], env=job["env"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        return process.wait(timeout=BINARY_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        return None


def run(job, logs_dir, print_lock):
    started = time.monotonic()
    log_path = os.path.join(logs_dir, "%s__%s__%s.log" % job["key"])
    with open(log_path, "w") as log:
        code = call_bounded(job, log)
    job["seconds"] = time.monotonic() - started
    timed_out = code is None
    job["code"] = 124 if timed_out else code
    code = job["code"]
    with open(log_path) as log:
        output = log.read()
    if timed_out:
        output += "\n---- killed after %.0f s (TINYMQ_TEST_BINARY_TIMEOUT_SECONDS)\n" % job["seconds"]
    results = [line for line in output.splitlines() if line.startswith("test result:")]
    with print_lock:
        status = "ok    " if code == 0 else "FAILED"
        print("%s %7.1f s  %s" % (status, job["seconds"], "::".join(job["key"])), flush=True)
        if code != 0:
            # In full, with its own `test result:` lines (counted once by .ci/run).
            print("---- output of %s (also in %s)" % ("::".join(job["key"]), log_path))
            print(output, flush=True)
        else:
            # Unindented: .ci/run adds up the lines that start with `test result:`.
            for line in results:
                print(line, flush=True)
    return job


def main():
    cargo_args, test_args = split_args(sys.argv[1:])
    cargo = os.environ.get("CARGO", shutil.which("cargo") or "cargo")
    binaries = build(cargo, cargo_args)
    target_dir = os.environ.get("CARGO_TARGET_DIR", "target")
    logs_dir = os.path.join(target_dir, "test-logs")
    os.makedirs(logs_dir, exist_ok=True)
    durations_path = os.path.join(target_dir, "test-durations.json")
    try:
        with open(durations_path) as f:
            durations = json.load(f)
    except (OSError, ValueError):
        durations = {}

    base_env = dict(os.environ)
    toolchain = rustup_toolchain()
    if toolchain:
        base_env["RUSTUP_TOOLCHAIN"] = toolchain
    jobs = []
    for package, name, kind, executable, package_dir in binaries:
        env = dict(base_env)
        env.update({"CARGO": cargo, "CARGO_MANIFEST_DIR": package_dir, "CARGO_PKG_NAME": package})
        jobs.append(
            {
                "key": (package, name, kind),
                "command": [executable] + test_args,
                "cwd": package_dir,
                "env": env,
            }
        )
    # Doc tests only for a whole-workspace run without a filter on packages or targets. They
    # run first, alone: `cargo test --doc` reads the dependencies' rlibs in target/, which a
    # test binary's own `cargo build` (the chaos tests build `tinymq`) may be rewriting.
    first = []
    if not any(a.startswith(("-p", "--package", "--test", "--lib", "--bin", "--exclude")) for a in cargo_args):
        doc_args = [a for a in cargo_args if a not in ("--no-fail-fast", "--workspace")]
        first.append(
            {
                "key": DOC_TESTS,
                "command": [cargo, "test", "--workspace", "--doc"] + doc_args + ["--"] + test_args,
                "cwd": os.getcwd(),
                "env": base_env,
            }
        )

    workers = int(os.environ.get("TINYMQ_TEST_JOBS", str((os.cpu_count() or 2) + 1)))
    print("== %d test binaries, %d at a time (TINYMQ_TEST_JOBS), after the doc tests" % (len(jobs), workers), flush=True)
    started = time.monotonic()
    print_lock = threading.Lock()
    done = [run(job, logs_dir, print_lock) for job in first]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        done += list(pool.map(lambda job: run(job, logs_dir, print_lock), order(jobs, durations)))
    wall = time.monotonic() - started

    for job in done:
        durations["::".join(job["key"])] = round(job["seconds"], 1)
    with open(durations_path, "w") as f:
        json.dump(durations, f, indent=1, sort_keys=True)
    failed = [job for job in done if job["code"] != 0]
    busy = sum(job["seconds"] for job in done)
    print("== tests ran in %.0f s (%.0f s of binaries' time, %d at a time)" % (wall, busy, workers))
    for job in sorted(done, key=lambda j: j["seconds"], reverse=True)[:8]:
        print("   %7.1f s  %s" % (job["seconds"], "::".join(job["key"])))
    if failed:
        print("== FAILED: " + ", ".join("::".join(job["key"]) for job in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
