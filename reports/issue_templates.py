"""Each engine's own bug template, filled from one issue's parts, and where and how to file it.

The templates follow the engines' .github/ISSUE_TEMPLATE files, field for field:
- vLLM (vllm-project/vllm, 400-bug-report.yml, "[Bug]: "): "Your current environment" (collect_env.py's output,
  which only the server's host can give: here what the server states, the command line, and the client apart),
  "🐛 Describe the bug" with a minimal repro, and the "Before submitting a new issue..." checkbox;
- llama.cpp (ggml-org/llama.cpp): wrong output is "Bug (model use)", 011-bug-results.yml, "Eval bug: " (name and
  version, operating systems, GGML backends, hardware, models, problem and steps, first bad commit, logs); a server
  error, a hang or a crash is "Bug (misc.)", 019-bug-misc.yml, "Misc. bug: " (name and version, operating systems,
  affected modules, command line, problem and steps, first bad commit, logs);
- SGLang (sgl-project/sglang, 1-bug-report.yml, "[Bug] "): its five-item checklist, describe the bug,
  reproduction, environment;
- anything else a plain bug report, with the engine's repository when the suite knows it.
Nothing is ticked or asserted on the reporter's behalf: every checkbox is left empty, and every field the suite
cannot know (the server's OS, backends and hardware when it did not start the server, a first bad commit) says
CHECK, so the reporter fills it in before filing. Each file opens with an HTML comment (invisible once filed) with
the `gh issue create` line that files it. Environment: none.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Callable

CHECK = "check before filing"
UNTICKED = f"(left unticked by the suite: {CHECK})"


def fence(text: str, lang: str = "") -> str:
    ticks = "````" if "```" in text else "```"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


@dataclass(frozen=True)
class Template:
    """One engine's bug template: its repository (None: the suite knows none), the template file it follows, the
    title prefix that template sets, and how the body is laid out."""

    repo: str | None
    form: str
    prefix: str
    body: Callable[[dict[str, str]], str]

    def header(self, title: str, path: str) -> str:
        """The HTML comment that opens the file: how to file it, with gh."""
        repo = self.repo or "OWNER/REPO"
        where = (f"{self.repo}'s \"{self.form}\" template" if self.repo else
                 f"a plain bug report: the suite knows no upstream repository for this engine ({CHECK}: put the "
                 f"engine's OWNER/REPO in the command)")
        command = (f"gh issue create --repo {repo} --title {shlex.quote(self.prefix + title)} "
                   f"--body-file {shlex.quote(path)}")
        return "\n".join(["<!--", f"How to file: this file is the issue's body, in {where}.",
                          f"Fill in or confirm every point marked \"{CHECK}\", then, from the run folder:",
                          command.replace("-->", "- ->"), "-->", ""])

    def render(self, title: str, path: str, parts: dict[str, str]) -> str:
        return self.header(title, path) + self.body(parts)


def _reproduction(d: dict[str, str]) -> str:
    return (f"Server command line:\n{fence(d['command'], 'shell')}\nBaseline server command line (the control, "
            f"without speculation):\n{fence(d['baseline_command'], 'shell')}\n\n{d['repro']}")


def _description(d: dict[str, str]) -> str:
    return "\n\n".join(p for p in (d["summary"], d["words"], d["evidence"]) if p)


def vllm(d: dict[str, str]) -> str:
    return f"""### Your current environment

<details>
<summary>The server as it states itself, and the client apart (collect_env.py was not run: it runs on the
server's host; {CHECK}: run it there and paste its output here)</summary>

{fence(d['environment'], 'text')}

Server command line:
{fence(d['command'], 'sh')}
Baseline server command line (the control, without speculation):
{fence(d['baseline_command'], 'sh')}
</details>

### 🐛 Describe the bug

{_description(d)}

Minimal repro (resends the failing request(s) to the candidate, and to the baseline as the control):

{d['repro']}

Server log:

{d['log']}

{d['found_by']}

### Before submitting a new issue...

- [ ] Make sure you already searched for relevant issues, and asked the chatbot living at the bottom right corner of the [documentation page](https://docs.vllm.ai/en/latest/), which can answer lots of frequently asked questions. {UNTICKED}
"""


def _llama_head(d: dict[str, str]) -> str:
    return f"""### Name and Version

{fence(d['version'], 'text')}

### Operating systems

{d['os']}
"""


def _llama_tail(d: dict[str, str]) -> str:
    return f"""### Problem description & steps to reproduce

{_description(d)}

Steps to reproduce: start both servers (command lines above), then run the repro below.

{d['repro']}

{d['found_by']}

Environment:
{fence(d['environment'], 'text')}

### First Bad Commit

unknown: the suite ran one build ({CHECK}: an earlier build that does not show it, or a bisect)

### Relevant log output

{d['log']}
"""


def llama_cpp_eval(d: dict[str, str]) -> str:
    return f"""{_llama_head(d)}
### GGML backends

unknown: the server does not state them ({CHECK}; llama-server logs them at start-up, its `system_info` line)

### Hardware

{d['hardware']}

### Models

{d['models']}

Server command line:
{fence(d['command'], 'shell')}
Baseline (the same server without speculation):
{fence(d['baseline_command'], 'shell')}

{_llama_tail(d)}"""


def llama_cpp_misc(d: dict[str, str]) -> str:
    return f"""{_llama_head(d)}
### Which llama.cpp modules do you know to be affected?

llama-server

### Command line

{fence(d['command'], 'shell')}
Baseline (the same server without speculation):
{fence(d['baseline_command'], 'shell')}

{_llama_tail(d)}"""


SGLANG_CHECKLIST = ("I searched related issues but found no solution.", "The bug persists in the latest version.",
                    "Issues without environment info and a minimal reproducible demo are hard to resolve and may "
                    "receive no feedback.",
                    "If this is not a bug report but a general question, please start a discussion at "
                    "https://github.com/sgl-project/sglang/discussions. Otherwise, it will be closed.",
                    "Please use English. Otherwise, it will be closed.")


def sglang(d: dict[str, str]) -> str:
    checklist = "\n".join(f"- [ ] {item}" for item in SGLANG_CHECKLIST)
    return f"""### Checklist

{checklist}

{UNTICKED}

### Describe the bug

{_description(d)}

### Reproduction

{_reproduction(d)}

{d['found_by']}

### Environment

`python3 -m sglang.check_env` was not run: it runs on the server's host ({CHECK}: paste its output here). What the
server states, and the client apart:

{fence(d['environment'], 'text')}

Server log:

{d['log']}
"""


def generic(d: dict[str, str]) -> str:
    told = "\n\n".join(p for p in (d["summary"], d["words"]) if p)
    return f"""## Describe the bug

{told}

## To reproduce

{_reproduction(d)}

## Expected vs actual

{d['evidence']}

## Environment

{fence(d['environment'], 'text')}

## Server log

{d['log']}

{d['found_by']}
"""


VLLM = Template("vllm-project/vllm", "🐛 Bug report (400-bug-report.yml)", "[Bug]: ", vllm)
LLAMA_EVAL = Template("ggml-org/llama.cpp", "Bug (model use) (011-bug-results.yml)", "Eval bug: ", llama_cpp_eval)
LLAMA_MISC = Template("ggml-org/llama.cpp", "Bug (misc.) (019-bug-misc.yml)", "Misc. bug: ", llama_cpp_misc)
SGLANG = Template("sgl-project/sglang", "🐞 Bug report (1-bug-report.yml)", "[Bug] ", sglang)
TGI = Template("huggingface/text-generation-inference", "plain bug report", "Bug: ", generic)
# keyed by the engine's one spelling (its flavour's `engine`, reports/repro.py engine_of): (wrong output, a server
# error, hang or crash); llama.cpp files the first as an eval bug and the second as a misc. bug of llama-server
TEMPLATES: dict[str, tuple[Template, Template]] = {"vllm": (VLLM, VLLM), "llama.cpp": (LLAMA_EVAL, LLAMA_MISC),
                                                   "sglang": (SGLANG, SGLANG), "tgi": (TGI, TGI)}
# the in-process routes' engines: transformers' assisted generation, and the suite's own reference engine (no upstream)
IN_PROCESS_REPOS = {"transformers": "huggingface/transformers"}


def template_for(engine: str, severity: str) -> Template:
    """The engine's template for a finding of `severity` ("bug": wrong output; "error": the server failed)."""
    if engine in TEMPLATES:
        return TEMPLATES[engine][severity != "bug"]
    return Template(IN_PROCESS_REPOS.get(engine), "plain bug report", "Bug: ", generic)
