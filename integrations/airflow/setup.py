"""The plugin's build (everything else is in pyproject.toml): before the package
is assembled, the home page card's bundle is built from ``ui/`` with npm into
``src/overseer_airflow/static/``, so that every wheel carries a bundle made from
the sources it was built from.

- npm on the ``PATH``: ``npm ci`` (when ``node_modules`` is missing or older than
  ``package-lock.json``), then ``npm run build``; a failure stops the build with
  npm's last lines.
- no npm, and the bundle already built (an sdist carries it, or ``npm run
  build`` was run by hand): it is used as it is.
- no npm and no bundle: the build stops with one line saying what to install.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "src" / "overseer_airflow" / "static" / "overseer-card.js"
#: npm ci on a cold cache fetches vite; on 2 busy cores, minutes.
NPM_TIMEOUT_S = 600


class BundleError(SystemExit):
    """Stops the build with one line."""


def npm(*args: str) -> None:
    try:
        done = subprocess.run(
            ["npm", *args],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise BundleError(f"npm {' '.join(args)} did not finish within {NPM_TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BundleError(f"npm {' '.join(args)} failed (exit {done.returncode}):\n{tail}")


def build_bundle() -> None:
    if shutil.which("npm") is None:
        if BUNDLE.is_file():
            return
        raise BundleError(
            "the home page card's bundle is not built and npm is not installed: install "
            "Node.js 20.19+ with npm, or run `npm ci && npm run build` in integrations/airflow "
            "where it is, then build the package again"
        )
    modules, lock = HERE / "node_modules", HERE / "package-lock.json"
    if not modules.is_dir() or modules.stat().st_mtime < lock.stat().st_mtime:
        npm("ci", "--no-audit", "--no-fund")
    npm("run", "build")
    if not BUNDLE.is_file():
        raise BundleError(f"npm run build left no {BUNDLE.relative_to(HERE)}")


class BuildWithBundle(build_py):
    def run(self) -> None:
        build_bundle()
        super().run()


setup(cmdclass={"build_py": BuildWithBundle})
