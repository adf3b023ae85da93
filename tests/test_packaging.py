"""The suite installs and runs like a pytest tool: from any folder, with absolute paths, beside others.

A non-editable `pip install .` into a fresh venv (dependencies borrowed from this interpreter's
site-packages, so no torch is installed twice), then `spec-route-suite` from an empty folder with
`--report-dir` and `--routes` as absolute paths in both option forms, the PyPI package `fixtures`
installed beside it, and another project's pytest run left untouched by the plugin.
"""
from __future__ import annotations

import configparser
import json
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("fixtures", "equivalence", "stressors", "reports")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_installed_under_one_import_name():
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    mapped = {"spec_route_suite." + str(init.parent.relative_to(ROOT)).replace("/", ".")
              for top in TOPS for init in (ROOT / top).rglob("__init__.py")}
    core = {str(init.parent.relative_to(ROOT)).replace("/", ".")
            for init in (ROOT / "spec_route_suite").rglob("__init__.py")}
    assert (mapped | core) - listed == set(), "package folders missing from pyproject's packages list"
    assert all(name.startswith("spec_route_suite") for name in listed)


def test_the_core_folders_are_their_import_paths():
    """spec_route_suite.X.Y is the file spec_route_suite/X/Y.py; only the design card's folders are mapped."""
    mapping = _pyproject()["tool"]["setuptools"]["package-dir"]
    assert mapping.pop("spec_route_suite") == "spec_route_suite"
    assert mapping == {f"spec_route_suite.{top}": top for top in TOPS} | {"spec_route_suite.presets": "routes"}
    init = (ROOT / "spec_route_suite" / "__init__.py").read_text()
    assert "__path__" not in init, "no __path__ manipulation: a checkout imports as the wheel does"


@pytest.mark.parametrize("name", ["tests", "benchmarks", "scripts", "docs"])
def test_the_checkouts_other_folders_are_not_subpackages(name):
    """`import spec_route_suite.tests` fails in a checkout, as in an installed wheel."""
    done = subprocess.run([sys.executable, "-c", f"import spec_route_suite.{name}"], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr, done.stdout + done.stderr


def test_the_two_pytest_configs_agree():
    """`pytest` in the checkout and `spec-route-suite` anywhere must collect and filter alike."""
    toml = _pyproject()["tool"]["pytest"]["ini_options"]
    ini = configparser.ConfigParser()
    ini.read(ROOT / "spec_route_suite" / "pytest.ini")
    section = ini["pytest"]
    assert section["testpaths"].split() == toml["testpaths"]
    assert section["python_files"].split() == toml["python_files"]
    assert section["addopts"].split() == toml["addopts"].split()
    assert [line for line in section["filterwarnings"].splitlines() if line.strip()] == toml["filterwarnings"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A fresh venv with the suite (not editable) and PyPI's `fixtures`; paths of its tools."""
    base = tmp_path_factory.mktemp("venv")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    _borrow_site_packages(python)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    build = base / "build"   # a copy: a build from the checkout would leave build/ and *.egg-info behind
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(build)], check=True)
    _overlay_working_tree(build)
    done = subprocess.run([*pip, str(build)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([*pip, "fixtures"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"PyPI's fixtures package could not be installed here: {done.stderr[-500:]}")
    return {"python": python, "cli": venv / "bin" / "spec-route-suite", "venv": venv}


def _borrow_site_packages(python: Path) -> None:
    """The dependencies of this interpreter, also when it is itself a venv (whose packages --system-site-packages
    does not see): its site-packages folders as plain path lines, after the new venv's own (a plain line runs
    none of their .pth files, so an editable install of the suite there stays out)."""
    done = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                          text=True, check=True)
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(done.stdout.strip()) / "borrowed-dependencies.pth").write_text("\n".join(ours) + "\n")


def _overlay_working_tree(clone: Path) -> None:
    """The clone gets this checkout's uncommitted changes too (staged or not, moves and deletions included), so the
    test judges what is here."""
    def git(*args: str) -> list[str]:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in [*git("diff", "--name-only", "HEAD"), *git("ls-files", "-o", "--exclude-standard")]:
        source, target = ROOT / name, clone / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
        elif target.is_file():   # deleted or moved away here
            target.unlink()


def _run(installed: dict, args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(installed["cli"]), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_installed_copy_imports_from_site_packages_beside_pypi_fixtures(installed, tmp_path):
    code = ("import fixtures, spec_route_suite.fixtures as ours, spec_route_suite.embedded as m, json;"
            "print(json.dumps([fixtures.__file__, hasattr(fixtures, 'Fixture'), ours.__file__,"
            " (m.MODELS_DIR / 'target' / 'model.safetensors').is_file()]))")
    done = subprocess.run([str(installed["python"]), "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    theirs, has_fixture_class, ours, models_shipped = json.loads(done.stdout)
    venv = str(installed["venv"])
    assert theirs.startswith(venv) and has_fixture_class, f"PyPI fixtures broken: {theirs}"
    assert ours.startswith(venv) and "site-packages/spec_route_suite/fixtures" in ours, ours
    assert models_shipped


LEAN = ["-n", "2", "-k", "test_greedy and math", "--prompt-limit", "1", "--max-new-tokens", "16"]


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_report_dir_and_routes_as_absolute_paths_from_an_empty_folder(installed, tmp_path, form):
    empty = tmp_path / "workspace"
    empty.mkdir()
    out = tmp_path / "nightly-reports"
    out.mkdir()   # an existing folder: the case that used to become pytest's rootdir
    done = subprocess.run([str(installed["python"]), "-c",
                           "import spec_route_suite.embedded as m; print(m.MODELS_DIR)"],
                          capture_output=True, text=True, check=True)
    models = Path(done.stdout.strip())
    routes = tmp_path / "my-routes.toml"
    routes.write_text(f'[baseline]\nkind = "hf"\nmodel = "{models / "target"}"\n\n'
                      f'[candidates.assisted]\nkind = "hf"\nmodel = "{models / "target"}"\n'
                      f'draft = "{models / "draft"}"\n')
    pairs = [("--report-dir", str(out)), ("--routes", str(routes))]
    args = [a for key, value in pairs for a in ((key, value) if form == "separate" else (f"{key}={value}",))]
    result = _run(installed, [*args, *LEAN], cwd=empty)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 1 and (runs[0] / "summary.md").is_file()
    report = json.loads((runs[0] / "report.json").read_text())
    assert [c["name"] for c in report["config"]["candidates"]] == ["assisted"]
    ours = [p.name for p in empty.iterdir() if not p.name.startswith(".")]   # (other plugins keep dot-folders)
    assert ours == [], "with --report-dir, nothing of the suite's is written into the folder it was run from"


def test_default_pair_from_an_empty_folder_writes_reports_there(installed, tmp_path):
    result = _run(installed, LEAN, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert (tmp_path / "reports" / "out" / "history.jsonl").is_file()


def test_plugin_is_inert_in_another_projects_test_run(installed, tmp_path):
    project = tmp_path / "other-project"
    project.mkdir()
    (project / "test_theirs.py").write_text(
        "import sys\n\ndef test_theirs():\n    assert 'torch' not in sys.modules\n    assert 'spec_route_suite' not in sys.modules\n")
    done = subprocess.run([str(installed["python"]), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "spec-suite" not in done.stdout and not (project / "reports").exists()
    helped = subprocess.run([str(installed["python"]), "-m", "pytest", "--help"], cwd=project,
                            capture_output=True, text=True, timeout=300)
    assert "--report-dir" not in helped.stdout and "--routes" not in helped.stdout
