"""examples/python_kv_blocks.py runs against the test cluster and verifies
what it reads back (exit code 0)."""

import os
import subprocess
import sys


def test_kv_blocks_example_runs(master):
    example = os.path.join(os.environ.get("MOONCAKE_TEST_ROOT", ""), "examples",
                           "python_kv_blocks.py")
    run = subprocess.run(
        [sys.executable, example, "--master", master, "--layers", "2", "--blocks", "8",
         "--rounds", "1"],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all 16 blocks read back byte-exact" in run.stdout
    assert "batch_get_into" in run.stdout
