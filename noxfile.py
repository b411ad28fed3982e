"""The development loop: ``nox -s lint tests`` (``nox -l`` lists the sessions).

Each session installs the checkout with the ``dev`` extra into a venv of its own (kept
between runs) and runs what CI runs (``.ci/run``): the static checks through
``hack/static-checks``, the tests through the README's pytest command. System packages are
not nox's to install; docs/testing.md lists them. CONTRIBUTING.md says where to start.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"
nox.options.default_venv_backend = "venv"

ROOT = Path(__file__).resolve().parent
K8S_UNPACK = ROOT.parent / "shared" / "k8s" / "unpack"


def _install(session: nox.Session, extras: str = "dev") -> None:
    session.install("-q", "-e", f".[{extras}]")


def _kubebuilder_assets() -> dict[str, str]:
    """The real kube-apiserver and etcd the API-server tests run against, where
    ``../shared/k8s`` is beside the checkout (without it those tests skip, saying so)."""
    if not os.access(K8S_UNPACK, os.X_OK):
        return {}
    assets = subprocess.run(
        [str(K8S_UNPACK), "/tmp/k8s-assets"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return {"KUBEBUILDER_ASSETS": assets}


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, ruff format, mypy --strict, the import contracts, hadolint."""
    _install(session)
    session.run("hack/static-checks", "lint", external=True)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite as CI runs it; pass pytest's arguments after ``--`` (``-m unit``)."""
    _install(session)
    session.run("python", "-m", "pytest", "-q", *session.posargs, env=_kubebuilder_assets())


@nox.session
def docs(session: nox.Session) -> None:
    """The generated reference pages are current, and the site builds strictly."""
    _install(session, "dev,docs")
    session.run("hack/static-checks", "docs", external=True)


@nox.session
def chart(session: nox.Session) -> None:
    """The Helm chart: strict lint, schema, render, kubernetes-validate, its README tables."""
    _install(session)
    session.run("hack/static-checks", "chart", external=True)
