"""Builds and installs the `mooncake` Python package.

    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install ./python          # from the repository root

Offline by design: no pyproject.toml, so pip runs this file with the
setuptools and wheel already installed (Debian's python3-setuptools and
python3-wheel) instead of fetching build requirements from a registry.

The extension `mooncake._mooncake` is built with CMake from the repository
root (python/..), target `mooncake_python` only. Environment knobs:

  MOONCAKE_BUILD_DIR   an already configured build tree to build in (and
                       reuse), e.g. the project's own `build`; default
                       python/build/cmake-<python tag>, configured here
                       (Release, tests off).
  MOONCAKE_SKIP_BUILD  1: do not run CMake at all; take the module already
                       built in MOONCAKE_BUILD_DIR (what the test does).
  CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (default: every CPU).
  MOONCAKE_SETUP_BUILD_BASE   setuptools' scratch directory (default
                       python/build), so a test can keep the tree clean.
"""

import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET = "mooncake_python"


def project_version():
    """The version in the top-level CMakeLists.txt project() call."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("project(") and " VERSION " in line:
                return line.split(" VERSION ")[1].split()[0].rstrip(")")
    return "0.0.0"


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Builds the extension target with CMake and copies the module in."""

    def build_extension(self, ext):
        build_dir = os.environ.get("MOONCAKE_BUILD_DIR")
        if build_dir:
            build_dir = self.resolve(build_dir)
            if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
                sys.exit("MOONCAKE_BUILD_DIR=%s is not a configured CMake build tree" % build_dir)
        else:
            build_dir = os.path.join(HERE, "build", "cmake-" + sys.implementation.cache_tag)
            self.configure(build_dir)
        if os.environ.get("MOONCAKE_SKIP_BUILD") != "1":
            self.compile(build_dir)
        built = self.find_module(build_dir)
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)

    @staticmethod
    def resolve(path):
        """A relative MOONCAKE_BUILD_DIR is taken from where pip was run
        ($PWD; pip itself runs this file in python/), else from the
        repository root."""
        if os.path.isabs(path):
            return path
        for base in (os.environ.get("PWD", ""), ROOT):
            if base and os.path.exists(os.path.join(base, path, "CMakeCache.txt")):
                return os.path.join(base, path)
        return os.path.abspath(path)

    def configure(self, build_dir):
        if os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            return
        # The real interpreter, not a venv's link to it that may go away.
        python = os.path.realpath(sys.executable)
        self.run_cmake(["cmake", "-S", ROOT, "-B", build_dir,
                        "-DCMAKE_BUILD_TYPE=Release",
                        "-DMOONCAKE_BUILD_TESTS=OFF",
                        "-DMOONCAKE_PYTHON=" + python])

    def compile(self, build_dir):
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        self.run_cmake(["cmake", "--build", build_dir, "--target", TARGET, "-j", jobs])

    @staticmethod
    def run_cmake(command):
        print("+ " + " ".join(command), flush=True)
        try:
            subprocess.run(command, check=True)
        except FileNotFoundError:
            sys.exit("cmake not found: install Debian's cmake (scripts/install-deps.sh)")
        except subprocess.CalledProcessError as e:
            sys.exit("CMake failed (exit %d); scripts/install-deps.sh installs what the build "
                     "needs (pybind11-dev and python3-dev for this module)" % e.returncode)

    @staticmethod
    def find_module(build_dir):
        """The module built for this interpreter (same extension suffix)."""
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        module_dir = os.path.join(build_dir, "python", "mooncake")
        path = os.path.join(module_dir, "_mooncake" + suffix)
        if os.path.exists(path):
            return path
        found = sorted(os.listdir(module_dir)) if os.path.isdir(module_dir) else []
        sys.exit("no _mooncake%s in %s (found: %s). The module is built for the interpreter in "
                 "MOONCAKE_PYTHON (default /usr/bin/python3); install with that Python, or "
                 "reconfigure with -DMOONCAKE_PYTHON=%s" %
                 (suffix, module_dir, ", ".join(found) or "nothing", sys.executable))


def scratch_options():
    """setuptools' build and egg-info directories under
    MOONCAKE_SETUP_BUILD_BASE, when set, instead of in python/."""
    base = os.environ.get("MOONCAKE_SETUP_BUILD_BASE")
    if not base:
        return {}
    os.makedirs(base, exist_ok=True)
    return {"build": {"build_base": base}, "egg_info": {"egg_base": base}}


setup(
    name="mooncake",
    version=project_version(),
    description="Python client of the Mooncake tiered cache (binding of mooncake::Client)",
    packages=["mooncake"],
    package_dir={"mooncake": "mooncake"},
    ext_modules=[CMakeExtension("mooncake._mooncake")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.8",
    zip_safe=False,
    options=scratch_options(),
)
