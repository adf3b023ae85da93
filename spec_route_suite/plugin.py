"""The suite's pytest plugin: options, configuration, collection and report wiring. It wires; it does not compute.

Loaded by the checkout's conftest.py (`pytest -n 8` in the repository) and by `spec-route-suite`
(`-p spec_route_suite.plugin`, from anywhere); it is not a pytest11 entry point, so other projects'
test runs in the same environment never see its options, its run folder or a torch import.

The options are registered from their declarations (options.py). Configuration is parsed once here
(pytest_configure) into a frozen SuiteConfig stored on the pytest config; the route fixtures
(fixtures/route_fixtures.py, loaded with this plugin) hand its parts down. A bad value exits with
code 4 naming the field.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from spec_route_suite import options, route_deaths
from spec_route_suite.config import suite_config_from_options
from spec_route_suite.routes.errors import CapabilityMissing, ContextExceeded, RouteDied, RouteError
from spec_route_suite.routes.config_errors import Problems
from spec_route_suite.routes.spec import ConfigError
from spec_route_suite.reports.collector import (UNJUDGED, UNJUDGED_PROPERTY, WORKER_STATE_KEY, RunCollector, check_of,
                                                new_run_id)
from spec_route_suite.reports.redact import Redactor
from spec_route_suite.reports.terminal import require_shortfall, verdict_block
from spec_route_suite.reports.writer import write_run_folder
from spec_route_suite.stash import COLLECTOR_KEY, CONFIG_KEY, ROUTE_SESSION_KEY

pytest_plugins = ("spec_route_suite.fixtures.route_fixtures",)   # the fixtures that hand routes to the checks
USAGE_KEY = pytest.StashKey["UsageErrors"]()
SERVERS_KEY = pytest.StashKey[object]()   # spec_route_suite.servers.ManagedServers | None, controller only
PREFLIGHT_KEY = pytest.StashKey[list]()   # spec_route_suite.preflight.RoutePreflight per server route, controller only
REPORT_KEY = pytest.StashKey[dict]()      # the run's report.json, once written (the closing block reads it)
USAGE_ERROR_PROPERTY = "spec_suite_usage_error"
RUN_ID_INPUT = "spec_suite_run_id"
INVOCATION_DIR_INPUT = "spec_suite_invocation_dir"


def pytest_addoption(parser: pytest.Parser) -> None:
    options.register(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "check(name): the check family a route-suite test belongs to")
    _route_suite_by_default(config)
    workerinput = getattr(config, "workerinput", None)
    invocation_dir = Path(workerinput[INVOCATION_DIR_INPUT]) if workerinput else config.invocation_params.dir
    suite, prompts = _configuration(config, invocation_dir, controller=workerinput is None)
    config.stash[CONFIG_KEY] = suite
    run_id = workerinput[RUN_ID_INPUT] if workerinput else new_run_id()
    collector = RunCollector(run_dir=suite.report_dir / run_id, run_id=run_id, config_public=suite.public_dict(),
                             compare_to=suite.compare_to, report_dir=suite.report_dir,
                             redact=Redactor(suite.routes.secrets()), is_worker=workerinput is not None,
                             worker_id=workerinput["workerid"] if workerinput else "main")
    collector.worker_state.notes.extend(prompts.notes)
    collector.command = typed_command(config)
    config.stash[COLLECTOR_KEY] = collector
    config.pluginmanager.register(collector, "spec-suite-collector")
    config.stash[USAGE_KEY] = UsageErrors()
    config.pluginmanager.register(config.stash[USAGE_KEY], "spec-suite-usage-errors")
    from spec_route_suite.progress import ProgressPlugin, ProgressSettings
    settings = ProgressSettings.from_options(config.getoption("progress"), config.getoption("progress_every"))
    config.pluginmanager.register(ProgressPlugin(config, settings), "spec-suite-progress")
    import torch  # deferred: option parsing and usage errors stay fast
    torch.set_num_threads(suite.torch_threads)


def _configuration(config: pytest.Config, invocation_dir: Path, *, controller: bool):
    """(SuiteConfig, prompt set) from the command line, or one usage error (exit 4) that names every mistake of
    the command line, the routes file and its [servers] table at once."""
    problems = Problems()
    suite = prompts = None
    given = options.suite_options(config)
    with problems.field():
        suite = suite_config_from_options(given, invocation_dir=invocation_dir)
    unmanaged = suite is not None and not suite.routes.setting("servers")
    if unmanaged and controller and _preflight_wanted(config):
        _fail_unreachable(suite)   # a server that is not there: one line now, before the prompts and torch load
    if suite is not None:
        from spec_route_suite.prompts.prompt_set import prompt_set
        with problems.field():
            prompts = prompt_set(suite)   # every source row read and checked: a malformed one exits 4 here
    with problems.field():
        if controller:
            _check_servers_table(given, invocation_dir)
    with problems.field():
        options.option("require").value({"require": config.getoption("require")})
    try:
        problems.raise_any()
    except ConfigError as exc:
        raise pytest.UsageError(f"bad configuration: {exc}") from None
    return suite, prompts


def _preflight_wanted(config: pytest.Config) -> bool:
    """The preflight talks to the servers: not when asked not to, nor for a run that sends nothing (--collect-only)."""
    return not config.getoption("no_preflight") and not config.getoption("collectonly")


def _fail_unreachable(suite) -> None:
    from spec_route_suite.preflight import unreachable
    down = unreachable([suite.routes.baseline, *suite.routes.candidates])
    if down:
        raise pytest.UsageError("preflight failed: " + "; ".join(c.line() for c in down))


def _check_servers_table(given, invocation_dir: Path) -> None:
    """The routes file's [servers] table, validated by its engine module before anything starts."""
    from spec_route_suite.config import routes_path
    if not options.option("routes").given(given):
        return
    path = routes_path(options.option("routes").given(given), invocation_dir)
    try:
        import tomllib
        table = tomllib.loads(path.read_text()).get("servers")
    except (OSError, ValueError):
        return   # the routes file's own reader names that
    from spec_route_suite.servers import servers_table
    servers_table(table, path)


def typed_command(config: pytest.Config) -> str:
    """The command as the user typed it: `spec-route-suite ARGS` (without what that command adds for pytest), or
    `pytest ARGS` in the checkout; recorded in report.json and quoted by issue files."""
    from spec_route_suite.cli import COMMAND, typed_args
    args = [str(a) for a in config.invocation_params.args]
    typed = typed_args(args)
    return shlex.join([COMMAND, *typed] if typed is not None else ["pytest", *args])


def _route_suite_by_default(config: pytest.Config) -> None:
    """No test path given, from a folder outside the suite (a nightly job's workspace): run the route
    suite, not whatever tests that folder holds. Inside the checkout pytest's own rules apply."""
    if config.args_source is not pytest.Config.ArgsSource.INVOCATION_DIR:
        return
    from spec_route_suite.paths import suite_root, suite_test_paths
    if config.invocation_params.dir.resolve().is_relative_to(suite_root()):
        return
    config.args[:] = suite_test_paths()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller -> worker: every worker writes into the same run."""
    node.workerinput[RUN_ID_INPUT] = node.config.stash[COLLECTOR_KEY].run_id
    node.workerinput[INVOCATION_DIR_INPUT] = str(node.config.invocation_params.dir)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`-n N` (xdist's default `--dist load`): the heaviest tests first, on distinct workers (schedule.py)."""
    if config.getvalue("dist") != "load":
        return None
    from spec_route_suite.schedule import LongestFirstScheduling
    return LongestFirstScheduling(config, log)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    suite = metafunc.config.stash[CONFIG_KEY]
    if "candidate" in metafunc.fixturenames:
        names = [c.name for c in suite.routes.candidates]
        metafunc.parametrize("candidate", names, indirect=True, ids=names, scope="session")
    if "prompt" in metafunc.fixturenames:
        from spec_route_suite.prompts.prompt_set import run_prompts
        prompts = run_prompts(suite)
        metafunc.parametrize("prompt", prompts, ids=[p.id for p in prompts])


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """A server that refused a request as too long and stated its limit has taught its route that limit, and
    every fixture sizes requests to the live limit: the test runs once more, re-planned, instead of ending
    as a route error (the route's note says what it learned). A capability a route turns out to lack in the
    middle of a test (its first answer without prompt logprobs) skips the test as not verified."""
    try:
        return (yield)
    except CapabilityMissing as exc:   # a capability the route turned out to lack mid-test: not verified, never an error
        pytest.skip(f"not verified: {exc.describe()}"[:500])
    except ContextExceeded as exc:
        if getattr(pyfuncitem, "_spec_suite_replanned", False):
            raise
        pyfuncitem._spec_suite_replanned = True
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        _log(f"spec-suite: {pyfuncitem.nodeid}: re-planned after the server stated its context limit "
             f"({exc.limit} tokens)")
        pyfuncitem.obj(**args)
        return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A route failure (HTTP error, timeout, dead connection) anywhere in a test becomes a finding (the speed
    gate, a route test of no family, records it under "measured"); a configuration error found only once
    the routes are up (a context too small) becomes one line."""
    excinfo = call.excinfo
    check = check_of(item) or (UNJUDGED if (UNJUDGED_PROPERTY, "1") in item.user_properties else None)
    collector = item.config.stash[COLLECTOR_KEY]
    if excinfo is not None and isinstance(excinfo.value, (RouteError, RouteDied)) and check:
        collector.record(item, route_deaths.failure_finding(item, excinfo.value, check=check, phase=call.when))
    ended = call.when == "call" or (call.when == "setup" and excinfo is not None)   # the test's last phase
    if ended and check:   # a candidate this test found wedged, whose baseline serves the request: its death
        for finding in route_deaths.wedge_findings(item, check=check, phase=call.when):
            collector.record(item, finding)
    outcome = yield
    if excinfo is not None and isinstance(excinfo.value, ConfigError):
        report = outcome.get_result()
        report.longrepr = f"bad configuration: {excinfo.value}"
        report.user_properties.append((USAGE_ERROR_PROPERTY, report.longrepr))


class UsageErrors:
    """Configuration errors raised inside tests, from any worker, in order: the run then exits 4."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == USAGE_ERROR_PROPERTY and value not in self.lines:
                self.lines.append(value)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Controller only, before any worker starts: managed servers up once for the whole run, and the
    HTTP routes' acceptance counters snapshotted (the run's profile is the difference at the end)."""
    config = session.config
    if getattr(config, "workerinput", None) is not None or config.option.collectonly:
        return
    from spec_route_suite.servers import ServerError, start_managed_servers
    suite = config.stash[CONFIG_KEY]
    try:
        config.stash[SERVERS_KEY] = start_managed_servers(suite.routes, suite.routes_file, log=_log)
    except ConfigError as exc:
        raise pytest.UsageError(f"bad configuration: {exc}") from None
    except ServerError as exc:  # the routes are not there: the run cannot judge them
        raise pytest.UsageError(f"preflight: managed servers did not start: {exc}") from None
    if _preflight_wanted(config):
        _preflight(config, suite)


def _preflight(config: pytest.Config, suite) -> None:
    """Every server route answers and speaks the local tokenizer's ids, or the run ends here (exit 4, one line,
    no run folder): a route that is not there is the user's configuration, never a finding."""
    from spec_route_suite.preflight import preflight
    checks = preflight([suite.routes.baseline, *suite.routes.candidates])
    config.stash[PREFLIGHT_KEY] = checks
    failed = [c for c in checks if not c.passed]
    if failed:
        servers = config.stash.get(SERVERS_KEY, None)
        if servers is not None:
            config.stash[SERVERS_KEY] = None
            servers.release(_log)
        raise pytest.UsageError("preflight failed: " + "; ".join(c.line() for c in failed))
    config.stash[COLLECTOR_KEY].worker_state.notes.extend(
        f"preflight: '{c.name}': {note}" for c in checks for note in c.notes)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What is judged, said before the first check: routes, the engines as they state themselves, the budget and
    the prompts."""
    suite = config.stash.get(CONFIG_KEY, None)
    if suite is None:
        return []
    stated = {c.name: c for c in config.stash.get(PREFLIGHT_KEY, [])}
    lines = []
    for role, spec in [("baseline", suite.routes.baseline)] + [("candidate", c) for c in suite.routes.candidates]:
        where = spec.base_url or spec.model
        check = stated.get(spec.name)
        engine = f", {check.engine} {check.version}" if check else ""
        drafting = (f", draft {spec.draft}" + (f" ({spec.num_assistant_tokens} tokens per step)"
                                               if spec.num_assistant_tokens else "") if spec.draft else
                    f", prompt lookup {spec.prompt_lookup}" if spec.prompt_lookup else "")
        lines.append(f"spec-route-suite {role} '{spec.name}': {spec.kind} {where}"
                     + (f" model {spec.model}" if spec.base_url else "") + drafting + engine)
        lines.extend(f"  preflight: {note}" for note in (check.notes if check else ()))
    prompts = "; ".join(_prompt_line(s) for s in suite.prompt_sources) or "the fixture prompts"
    lines.append(f"spec-route-suite budget: --alpha {suite.alpha:g}, --detect-tv {suite.detect_tv:g}, concurrency "
                 f"{','.join(map(str, suite.concurrency_levels))}; prompts: {prompts}")
    return lines


def _prompt_line(source) -> str:
    """One prompt source as a person reads it: name, kind, where from, how many rows."""
    rows = "every row" if source.limit is None else f"up to {source.limit} rows"
    return f"{source.describe()}, {rows}" + (f", {source.per_category} per category" if source.per_category else "")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _finish_servers(config: pytest.Config, collector: RunCollector) -> None:
    """The run's server-side acceptance profile and launch settings, then stop what this run started."""
    servers = config.stash.get(SERVERS_KEY, None)
    if servers is None:
        return
    config.stash[SERVERS_KEY] = None
    from spec_route_suite.servers import server_memory
    try:
        collector.server_acceptance = servers.acceptance_delta()
        collector.server_launch = servers.launch_info()
        collector.server_memory = server_memory(servers.specs.values())
    finally:
        stopped = servers.release(_log)
        if stopped:
            collector.worker_state.notes.append(f"stopped the servers this run started: {', '.join(stopped)}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    collector = session.config.stash.get(COLLECTOR_KEY, None)
    if collector is None:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_STATE_KEY] = collector.worker_state.to_json()
        return
    if collector.active and not session.config.option.collectonly and exitstatus != pytest.ExitCode.INTERRUPTED:
        from spec_route_suite.class_phases import run_deferred_phases   # servers still up, now idle
        from spec_route_suite.load_phases import run_load_phases
        run_deferred_phases(session.config.stash[CONFIG_KEY], collector, _log)
        run_load_phases(session.config.stash[CONFIG_KEY], collector, _log)
    _finish_servers(session.config, collector)
    usage = session.config.stash[USAGE_KEY].lines
    if usage:  # pytest's exit code for bad configuration, as if it had been found before any test
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        collector.worker_state.notes.extend(usage)
    if collector.active and not session.config.option.collectonly:
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            collector.interrupted = True
        collector.worker_states = collector.worker_states or [collector.worker_state.__dict__]
        report = write_run_folder(collector)
        session.config.stash[REPORT_KEY] = report
        required = session.config.getoption("require")
        if required and session.exitstatus == pytest.ExitCode.OK and require_shortfall(report, required):
            session.exitstatus = options.REQUIRE_EXIT


def pytest_unconfigure(config: pytest.Config) -> None:
    """Backstop: servers this run started are stopped even when the session never finished."""
    servers = config.stash.get(SERVERS_KEY, None) if hasattr(config, "stash") else None
    if servers is not None:
        config.stash[SERVERS_KEY] = None
        servers.release(_log)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The verdict block, last on the terminal (every run that wrote its folder: passed, failed or interrupted),
    and what --require made of it."""
    collector = config.stash.get(COLLECTOR_KEY, None)
    report = config.stash.get(REPORT_KEY, None)
    for line in config.stash[USAGE_KEY].lines if USAGE_KEY in config.stash else ():
        terminalreporter.write_line(f"ERROR: {line}", red=True)
    if collector is None or report is None:
        return
    colour = {"adopt": "green", "pilot": "yellow", "wait": "yellow", "avoid": "red"}[report["verdict"]]
    terminalreporter.write_sep("=", "spec-route-suite verdict", **{colour: True, "bold": True})
    for line in verdict_block(report, collector.run_dir):
        terminalreporter.write_line(line)
    required = config.getoption("require")
    shortfall = require_shortfall(report, required) if required else []
    if shortfall:
        terminalreporter.write_line(f"--require {required} not met (exit {options.REQUIRE_EXIT}): "
                                    + "; ".join(shortfall), red=True)
