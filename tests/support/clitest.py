"""Shared by the tests that drive the `nemotron` command from outside: run it, count the
checks, and report (exit 1 when any failed)."""
import subprocess
import sys


class CliTest:
    def __init__(self, binary, name):
        self.binary, self.name = binary, name
        self.passed = self.failed = 0

    def run(self, args, env=None, timeout=300):
        return subprocess.run([self.binary] + args, capture_output=True, text=True, errors="replace",
                              timeout=timeout, env=env)

    def check(self, name, cond, detail=""):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}")

    def must(self, args, env=None):
        """Runs a setup step; a failure ends the test."""
        r = self.run(args, env=env)
        if r.returncode != 0:
            sys.exit(f"FAIL {' '.join(args)}: rc={r.returncode}\n{r.stderr}")
        return r

    def expect_error(self, name, args, needles, env=None):
        """Exit 1 with one `error: ` message (notes may come before it) holding every needle."""
        r = self.run(args, env=env)
        errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
        ok = r.returncode == 1 and len(errors) == 1 and all(n in r.stderr for n in needles)
        self.check(name, ok, f"rc={r.returncode} stderr={r.stderr!r}")
        return r

    def finish(self):
        print(f"{self.name}: {self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)
