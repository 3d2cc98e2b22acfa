"""What a tool does to the world, and the `traceforge.toml` settings of dependency inference.

Every tool call gets one effect:

- ``pure``: computes from its arguments only (calculate, convert, think). Never ordered by state.
- ``read``: reads state (get, list, search, Read, Grep). Read-only calls float.
- ``write``: changes state (create, update, send, book, Edit). Orders later calls on the same resource.
- ``unknown``: nothing says (an opaque shell, a name without a known verb). A barrier in conservative mode.

The effect comes from, in order: the user's `[tools]` table in traceforge.toml; the tool definition's
MCP annotations (`readOnlyHint`, `destructiveHint`); built-in rules for well-known agent harnesses
(Claude Code, OpenHands, SWE-agent) and shell commands; the verbs of the tool's name; the first verb of
its description. The first that decides wins, and the reason is kept for the report.

>>> classify("get_order_details", {"order_id": "W1"}).effect
'read'
>>> classify("cancel_pending_order", {"order_id": "W1"}).effect
'write'
>>> classify("Bash", {"command": "ls -la src"}).effect
'read'
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EFFECTS = ("pure", "read", "write", "unknown")
MODES = ("conservative", "loose")
CONFIG_FILE = "traceforge.toml"

# The stated latency defaults of the schedule model, used where a trace has no measured durations.
# 2 s is a typical tool-calling LLM turn of a frontier API model (LLMCompiler's Movie Recommendation
# planner turn took 1.88 s); 600 ms is that paper's mean search-tool latency (0.61 s).
DEFAULT_LLM_MS = 2000.0
DEFAULT_TOOL_MS = 600.0


class ConfigError(ValueError):
    """A traceforge.toml that cannot be used, with the file, the key and what to write instead."""


@dataclass(frozen=True)
class ToolRule:
    """What traceforge.toml says about the tools whose names match `pattern` (fnmatch-style)."""

    pattern: str
    effect: str | None = None
    resource: tuple[str, ...] = ()  # argument names that name the resource the tool touches
    read_when: dict[str, frozenset[str]] = field(default_factory=dict)  # argument -> values that only read


@dataclass
class DepsConfig:
    """Settings of dependency inference and the schedule model (the [tools] and [dag] tables)."""

    rules: list[ToolRule] = field(default_factory=list)
    default_effect: str = "unknown"
    llm_ms: float = DEFAULT_LLM_MS
    tool_ms: float = DEFAULT_TOOL_MS
    path: str | None = None

    def rule_for(self, name: str) -> ToolRule | None:
        lowered = name.lower()
        for rule in self.rules:
            if rule.pattern == name:
                return rule
        for rule in self.rules:
            if fnmatch.fnmatchcase(lowered, rule.pattern.lower()):
                return rule
        return None

    @property
    def resource_params(self) -> frozenset[str]:
        """Argument names some rule declares a resource: they name resources for every tool."""
        return frozenset(name for rule in self.rules for name in rule.resource)

    def fingerprint(self) -> str:
        """A short digest of every setting that changes the analysis (stored with its results)."""
        payload = [
            [r.pattern, r.effect, list(r.resource), {k: sorted(v) for k, v in r.read_when.items()}]
            for r in self.rules
        ]
        text = json.dumps([payload, self.default_effect, self.llm_ms, self.tool_ms], sort_keys=True)
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def load_config(path: str | Path | None = None) -> DepsConfig:
    """The settings in `path`, or in ./traceforge.toml when `path` is None and that file exists.

    Example traceforge.toml::

        [tools]
        default = "unknown"                  # effect for tools nothing else classifies
        get_weather = "read"                 # shorthand: a tool name (or glob) and its effect
        "mcp__github__get_*" = "read"

        [tools.write_file]
        effect = "write"
        resource = "path"                    # only calls with the same `path` are ordered by it

        [tools.str_replace_editor]
        effect = "write"
        read_when = { command = ["view"] }   # but `command = "view"` only reads

        [tools.send_invoice]
        destructiveHint = true               # MCP-style hints work too (readOnlyHint, destructiveHint)

        [dag]
        llm_ms = 1500                        # the stated per-turn LLM latency where none was measured
        tool_ms = 400                        # and per-call tool latency

    Raises ConfigError naming the file and the key when a value cannot be used.
    """
    if path is None:
        default = Path(CONFIG_FILE)
        if not default.is_file():
            return DepsConfig()
        path = default
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such file. Pass an existing traceforge.toml or leave it out.") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}. Fix the line it names.") from exc
    return config_from_dict(data, str(path))


def config_from_dict(data: dict[str, Any], source: str = "traceforge.toml") -> DepsConfig:
    """Settings from the parsed TOML document (tables other than [tools] and [dag] are ignored)."""
    config = DepsConfig(path=source)
    tools = data.get("tools", {})
    if not isinstance(tools, dict):
        raise ConfigError(f'{source}: [tools] must be a table of tool names, e.g. get_weather = "read"')
    for key, value in tools.items():
        where = f"{source}: tools.{key}"
        if key == "default":
            config.default_effect = _effect(value, where)
        elif isinstance(value, str):
            config.rules.append(ToolRule(key, effect=_effect(value, where)))
        elif isinstance(value, dict):
            config.rules.append(_rule(key, value, where))
        else:
            raise ConfigError(f"{where}: expected an effect ({', '.join(EFFECTS)}) or a table")
    dag = data.get("dag", {})
    if not isinstance(dag, dict):
        raise ConfigError(f"{source}: [dag] must be a table (llm_ms, tool_ms)")
    for key in ("llm_ms", "tool_ms"):
        if key in dag:
            value = dag[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"{source}: dag.{key} must be a non-negative number of milliseconds")
            setattr(config, key, float(value))
    unknown = set(dag) - {"llm_ms", "tool_ms"}
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) in [dag]: {', '.join(sorted(unknown))}")
    return config


def _effect(value: Any, where: str) -> str:
    if value not in EFFECTS:
        raise ConfigError(f"{where}: effect must be one of {', '.join(EFFECTS)}, not {value!r}")
    return value


def _rule(pattern: str, table: dict[str, Any], where: str) -> ToolRule:
    known = {"effect", "resource", "read_when", "readOnlyHint", "destructiveHint"}
    extra = set(table) - known
    if extra:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(sorted(extra))}; known: {', '.join(sorted(known))}"
        )
    effect = _effect(table["effect"], f"{where}.effect") if "effect" in table else None
    if effect is None:
        effect = effect_from_hints(table)
    resource = table.get("resource", ())
    if isinstance(resource, str):
        resource = (resource,)
    if not isinstance(resource, list | tuple) or not all(isinstance(r, str) for r in resource):
        raise ConfigError(f"{where}.resource: expected an argument name or a list of them")
    read_when: dict[str, frozenset[str]] = {}
    raw_when = table.get("read_when", {})
    if not isinstance(raw_when, dict):
        raise ConfigError(f'{where}.read_when: expected a table such as {{ command = ["view"] }}')
    for argument, values in raw_when.items():
        if isinstance(values, str):
            values = [values]
        if not isinstance(values, list):
            raise ConfigError(f"{where}.read_when.{argument}: expected a value or a list of values")
        read_when[argument] = frozenset(str(v) for v in values)
    return ToolRule(pattern, effect=effect, resource=tuple(resource), read_when=read_when)


def effect_from_hints(annotations: Any) -> str | None:
    """read / write from MCP tool annotations (`readOnlyHint`, `destructiveHint`), else None."""
    if not isinstance(annotations, dict):
        return None
    if annotations.get("readOnlyHint") is True:
        return "read"
    if annotations.get("destructiveHint") is True or annotations.get("readOnlyHint") is False:
        return "write"
    return None


# --- built-in knowledge -------------------------------------------------------------------------


def word_set(text: str) -> frozenset[str]:
    """The whitespace-separated words of `text`, for readable word lists."""
    return frozenset(text.split())


PURE_VERBS = word_set(
    "calculate calc compute convert solve estimate predict evaluate eval sum multiply divide subtract "
    "average mean median mode variance integrate integral differentiate derivative factorial simulate "
    "translate encode decode hash format parse validate think plan reason summarize summarise sort "
    "filter round normalize analyze analyse correlate interpolate extrapolate transform tokenize "
    "classify score rank compare diff generate plot draw chart mix combine fit regress reverse assess "
    "examine design test analysis"
)
READ_VERBS = word_set(
    "get list search find fetch read query lookup look view show describe check retrieve inspect browse "
    "load see peek cat grep glob ls head tail stat exists locate monitor watch recommend explore scan "
    "identify detect recognize verify measure count select download open visit scrape crawl ask poll "
    "wait info status track"
)
WRITE_VERBS = word_set(
    "create update delete remove set write edit send post put patch insert add book cancel modify move "
    "rename upload submit transfer pay exchange return reserve buy purchase order invest withdraw "
    "deposit save store commit push merge apply install uninstall deploy publish schedule assign close "
    "approve reject register subscribe unsubscribe enable disable start stop restart kill play pause "
    "mkdir rm replace append clear reset grant revoke archive mark like share invite block unblock lock "
    "unlock sign train notify email message reply comment upsert drop truncate configure change toggle "
    "rate review print display make build compile rent"
)
# Words a description opens with before its verb ("This tool performs a ..."), and verbs that in a
# description mean "outputs" ("Returns the weather") rather than an action (returning an order).
DESCRIPTION_FILLER = word_set(
    "this the a an tool function method api endpoint that which to will can is used use uses allows "
    "allow helps help lets perform performs do does run runs carry carries out"
)
DESCRIPTION_OUTPUT_VERBS = word_set("return returns provide provides give gives tell tells show shows")
SHELL_NAMES = word_set(
    "bash shell sh zsh terminal exec execute run command cmd powershell python ipython "
    "code_interpreter jupyter run_command execute_bash execute_command run_shell_command "
    "run_terminal_cmd"
)
# Programs that only read when run without output redirection.
READ_ONLY_PROGRAMS = word_set(
    "ls cat head tail grep egrep fgrep rg ag find fd wc pwd echo printf tree file stat du df which whereis "
    "type less more sort uniq cut awk diff cmp date whoami env printenv id uname hostname ps top jq yq "
    "nl od xxd hexdump basename dirname realpath readlink true test"
)
READ_ONLY_GIT = word_set("status log diff show branch blame ls-files rev-parse describe remote grep")
# Well-known agent harness tools: (effect, resource arguments).
KNOWN_TOOLS: dict[str, tuple[str, tuple[str, ...]]] = {
    # Claude Code
    "read": ("read", ("file_path", "path")),
    "glob": ("read", ()),
    "grep": ("read", ()),
    "ls": ("read", ("path",)),
    "webfetch": ("read", ()),
    "websearch": ("read", ()),
    "notebookread": ("read", ("notebook_path",)),
    "write": ("write", ("file_path", "path")),
    "edit": ("write", ("file_path", "path")),
    "multiedit": ("write", ("file_path",)),
    "notebookedit": ("write", ("notebook_path",)),
    "todowrite": ("write", ()),
    "todoread": ("read", ()),
    "exitplanmode": ("pure", ()),
    "task": ("unknown", ()),
    # OpenHands / SWE-agent
    "think": ("pure", ()),
    "finish": ("write", ()),
    "submit": ("write", ()),
    "browser": ("unknown", ()),
    "web_read": ("read", ()),
    "str_replace_editor": ("write", ("path",)),
    "str_replace_based_edit_tool": ("write", ("path",)),
    "open": ("read", ("path",)),
    "goto": ("read", ()),
    "scroll_up": ("read", ()),
    "scroll_down": ("read", ()),
    "find_file": ("read", ()),
    "search_file": ("read", ()),
    "search_dir": ("read", ()),
    "create": ("write", ("filename",)),
}
# str_replace_editor-style tools that only read for some sub-commands.
READ_SUBCOMMANDS = {"command": frozenset({"view", "view_range", "read", "list"})}

KEY_PARAM = re.compile(
    r"(^|[_\-.])(id|ids|key|keys|uuid|path|paths|file|files|filename|filepath|dir|directory|folder|url|urls|"
    r"uri|account|ref|sha|branch|repo|repository|ticket|issue|table|record|handle|slug|sku)$"
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_DESCRIPTION_WORD = re.compile(r"[A-Za-z]+")


@functools.lru_cache(maxsize=1 << 14)
def name_words(name: str) -> tuple[str, ...]:
    """The words of a tool or parameter name: snake_case, camelCase, dotted and dashed parts.

    >>> name_words("GameGuideAPI.search_guide")
    ('game', 'guide', 'api', 'search', 'guide')
    """
    words = []
    for part in _SPLIT.split(name):
        words.extend(w.lower() for w in _CAMEL.split(part) if w)
    return tuple(words)


GENERIC_NOUNS = word_set(
    "api tool tools data info details detail by for of to from with all new current latest"
)


@functools.lru_cache(maxsize=1 << 14)
def tool_nouns(name: str) -> frozenset[str]:
    """The objects a tool's name talks about, singular: what makes two tools siblings.

    >>> sorted(tool_nouns("search_products")), sorted(tool_nouns("get_product_details"))
    (['product'], ['product'])
    """
    nouns = set()
    for word in name_words(name):
        if word in PURE_VERBS or word in READ_VERBS or word in WRITE_VERBS or word in GENERIC_NOUNS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        if len(word) >= 3:
            nouns.add(word)
    return frozenset(nouns)


@functools.lru_cache(maxsize=1 << 14)
def is_key_param(name: str) -> bool:
    """Whether an argument name names a resource (order_id, file_path, playerID, url...)."""
    snake = "_".join(name_words(name))
    return bool(KEY_PARAM.search(snake))


def _verb_effect(words: list[str]) -> str | None:
    for word in words:
        for candidate in (word, word[:-1] if word.endswith("s") else word, _stem(word)):
            if candidate in WRITE_VERBS:
                return "write"
            if candidate in READ_VERBS:
                return "read"
            if candidate in PURE_VERBS:
                return "pure"
    return None


def _stem(word: str) -> str:
    for suffix, repl in (("ing", ""), ("ies", "y"), ("ed", ""), ("es", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + repl
    return word


@dataclass(frozen=True)
class Effect:
    """A call's effect, the argument names that identify what it touches, and why."""

    effect: str
    resource: tuple[str, ...] = ()  # configured resource arguments; empty: any key-like argument
    reason: str = ""


def classify(
    name: str,
    arguments: Any = None,
    description: str | None = None,
    annotations: Any = None,
    config: DepsConfig | None = None,
) -> Effect:
    """The effect of one call of tool `name` with `arguments` (see the module docstring for the order)."""
    config = config or DepsConfig()
    rule = config.rule_for(name)
    if rule is not None:
        effect = rule.effect
        if rule.read_when and isinstance(arguments, dict):
            for argument, values in rule.read_when.items():
                if str(arguments.get(argument)) in values:
                    return Effect(
                        "read", rule.resource, f"traceforge.toml: {rule.pattern} read_when {argument}"
                    )
        if effect is not None:
            return Effect(effect, rule.resource, f"traceforge.toml: {rule.pattern}")
    hinted = effect_from_hints(annotations)
    if hinted is not None:
        return Effect(hinted, rule.resource if rule else (), "MCP annotations")
    resource = rule.resource if rule else ()
    lowered = name.lower()
    known = KNOWN_TOOLS.get(lowered)
    if known is not None:
        effect, known_resource = known
        if effect == "write" and isinstance(arguments, dict):
            for argument, values in READ_SUBCOMMANDS.items():
                if str(arguments.get(argument, "")).lower() in values:
                    return Effect(
                        "read", resource or known_resource, f"{name} {argument}={arguments[argument]}"
                    )
        return Effect(effect, resource or known_resource, f"known tool {name}")
    if lowered in SHELL_NAMES or lowered.rsplit(".", 1)[-1] in SHELL_NAMES:
        command = _command_of(arguments)
        if command is not None and shell_reads_only(command):
            return Effect("read", resource, "read-only shell command")
        return Effect("unknown", resource, "shell or code execution")
    namespace, _, method = name.rpartition(".")
    effect = _verb_effect(name_words(method)) or _verb_effect(name_words(namespace))
    if effect is not None:
        return Effect(effect, resource, "verb in the name")
    if description:
        words = [w.lower() for w in _DESCRIPTION_WORD.findall(description)[:12]]
        words = [w for w in words if w not in DESCRIPTION_FILLER][:4]
        if words and words[0] in DESCRIPTION_OUTPUT_VERBS:
            return Effect("read", resource, "verb in the description")
        effect = _verb_effect(words)
        if effect is not None:
            return Effect(effect, resource, "verb in the description")
    return Effect(config.default_effect, resource, "no rule, verb or description decides")


def _command_of(arguments: Any) -> str | None:
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict):
        for key in ("command", "cmd", "script", "code"):
            if isinstance(arguments.get(key), str):
                return arguments[key]
    return None


def shell_reads_only(command: str) -> bool:
    """Whether every stage of a shell command line runs a read-only program with no output redirection.

    >>> shell_reads_only("cd src && grep -rn TODO . | head")
    True
    >>> shell_reads_only("ls > files.txt")
    False
    """
    if re.search(r"(^|[^0-9&>])>(?!&)|>>|\btee\b|\$\(|`", command):
        return False
    try:
        stages = re.split(r"&&|\|\||[|;\n]", command)
    except re.error:
        return False
    seen = False
    for stage in stages:
        stage = stage.strip()
        if not stage:
            continue
        try:
            words = shlex.split(stage)
        except ValueError:
            return False
        if not words:
            continue
        program = words[0].rsplit("/", 1)[-1]
        if program == "cd":
            continue
        if program == "git":
            sub = next((w for w in words[1:] if not w.startswith("-")), "")
            if sub not in READ_ONLY_GIT:
                return False
        elif not _reads_only(program, words[1:]):
            return False
        seen = True
    return seen


def _reads_only(program: str, arguments: list[str]) -> bool:
    if program == "find":
        return not any(w in ("-delete", "-exec", "-execdir", "-ok", "-fprint") for w in arguments)
    if program in ("sed", "awk"):
        return not any(w.startswith("-i") for w in arguments)
    return program in READ_ONLY_PROGRAMS
