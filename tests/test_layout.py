"""The layout's rules, checked: no function over 50 lines; `analysis` imports of `trials`
only its interface and the store, and no renderer where it only computes (`plan`); `trials`
imports `analysis` only where it decides (augment's looks)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_function_is_over_50_lines():
    long = []
    for package in ("dspark", "trials", "analysis", "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > 50:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def test_no_function_takes_more_than_8_parameters():
    """Settings objects in place of long parameter lists (self, cls, *args and **kwargs not
    counted: a public function's **given are its settings' fields by name); the workload's
    decoding takes its three models as one `blocks.Models`."""
    many = []
    for package in ("dspark", "trials", "analysis", "bench", "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    a = node.args
                    named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
                    if len(named) > 8:
                        many.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({len(named)})")
    assert not many, many


MODULE_LINES = 400  # "about 400": none of the engine or the statistics past it


def test_no_module_of_the_engine_or_the_statistics_is_over_about_400_lines():
    """A module holds one thing a reader can take in: those past the limit are split by what
    they hold (verdicts: margins.py, verdict_notes.py; cli: listing.py, spec_summary.py; ...)."""
    long = [f"{path.relative_to(ROOT)} ({n} lines)" for package in ("trials", "analysis")
            for path in sorted((ROOT / package).rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MODULE_LINES]
    assert not long, long


def test_the_reading_side_loads_no_ray_torch_or_renderer():
    """`trials status` and `list` answer from storage through trials.saved (no Ray, Tune,
    torch or MLflow; the DSpark workload's registry is loaded without torch); the REST reader
    loads no MLflow; `analysis plan` imports statistics only (no matplotlib, no renderer)."""
    code = ("import sys; import trials.saved, trials.cli, analysis.plan, analysis.sweep_reader, trials.store.reader\n"
            "import trials.workload; trials.workload.load_workload('dspark').registry\n"
            "print(sorted(m for m in ('ray', 'torch', 'mlflow', 'matplotlib', 'analysis.rendering') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_readme_is_short_and_its_annotated_spec_is_a_valid_spec():
    """A newcomer's README: one screenful of contents, under 300 lines, each linked document
    present; its annotated spec is the same as the shipped one it shortens (validated like
    any spec)."""
    import re

    import yaml

    from trials.validate import parse

    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for link in re.findall(r"\]\(((?:docs|results)/[^)#]+)\)", text):
        assert (ROOT / link).is_file(), link
    block = text.split("## A spec, annotated", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    raw = yaml.safe_load(block)
    spec = parse(raw)
    shipped = yaml.safe_load((ROOT / "sweeps" / "paper-drafter.yaml").read_text())
    for key in ("name", "factors", "responses", "primary_terms", "sequential", "replicates", "design"):
        part = {k: shipped[key][k] for k in raw[key]} if isinstance(raw[key], dict) else shipped[key]
        assert raw[key] == part, key  # the README shows the shipped spec's own settings
    assert spec.name == "paper-drafter" and len(spec.trials) == 16


# ---------------------------------------------------------------- the layers and the graph

PACKAGES = ("dspark", "trials", "analysis", "bench")


def _modules() -> dict[str, Path]:
    """Every module of the project's packages (and the benchmarks) by dotted name."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every import in the file, at any
    depth (in functions and `TYPE_CHECKING` blocks too), relative ones resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.append((module, [a.name for a in node.names], node.lineno))
    return out


def _edges() -> dict[str, set[str]]:
    """module -> the project's modules it imports (`from pkg import mod` counts as pkg.mod)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for module, names, _ in _imports(name, path):
            for target in [f"{module}.{n}" for n in names] + [module]:
                if target in mods and target != name:
                    graph[name].add(target)
                    break
    return graph


RECORD = ("trials.store.record", "trials.store.items")  # leaf modules: a record's checks, the items convention


def test_the_engine_and_the_statistics_import_no_workload():
    """`trials` and `analysis` know workloads only through `trials.workload` (loaded by
    name); the workload imports no engine (its CLI entry point only the store); the
    statistics import of the engine only its interface, the sweep's record
    (`trials.sweep_record`) and export (`trials.export`) and the store; the store imports
    nothing of the project outside it; the interface, of the engine, only the sweep record."""
    allowed_in_analysis = ("trials.store", "trials.workload", "trials.registry", "trials.workload_defaults", "trials.export",
                           "trials.sweep_record", "trials.fraction", "trials.timing.timing_settings")
    # and the looks of `--until-decided` (DRIVES_THE_ENGINE), the engine's augment that adds blocks
    drives = ("trials.augment", "trials.run_settings")
    bad = []
    for name, path in _modules().items():
        for module, _, line in _imports(name, path):
            where = f"{path.relative_to(ROOT)}:{line} imports {module}"
            if name.startswith(("trials", "analysis")) and module.split(".")[0] == "dspark":
                bad.append(where)
            if name.startswith("dspark") and module.split(".")[0] in ("trials", "analysis") and not (
                    name == "dspark.cli" and module.startswith("trials.store")):
                bad.append(where)
            if name.startswith("analysis") and module.startswith("trials") and not module.startswith(allowed_in_analysis) \
                    and not (name == DRIVES_THE_ENGINE and module in drives):
                bad.append(where)
            if name.startswith("trials.store") and module.split(".")[0] in ("trials", "analysis", "dspark") and \
                    not module.startswith("trials.store"):
                bad.append(where)
            interface = ("trials.workload", "trials.registry", "trials.workload_defaults", "trials.workload_config")
            # the interface's one import of the engine: the sweep record's checks (a leaf module)
            if name in interface and module.split(".")[0] in ("analysis", "dspark") or \
                    name in interface and module.startswith("trials") and module not in interface + RECORD:
                bad.append(where)
    assert not bad, bad


def test_the_engine_and_the_statistics_name_no_metric_of_the_workload():
    """What the statistics need of a metric (its item count, decoded, timed, re-evaluable,
    degenerate, plotted) is its registry row's declaration, never its name: no source file of
    `trials` or `analysis` names one of DSpark's metrics or metric families (the engine's own
    columns aside: the timing pass's `timing/...`, the items' `jack/...` and `split/<response>@g`)."""
    from dspark.metrics import REGISTRY

    engine = ("timing/", "jack/")
    stems = {m.name.split("@")[0] + ("@" if "@" in m.name else "") for m in REGISTRY
             if not m.name.startswith(engine) and "<" not in m.name}  # `split/<response>@g`: the engine's convention
    # a family's stem (`x/acc@`) is its name whatever follows; a whole name, not part of a longer one
    found = re.compile("|".join(re.escape(s) + ("" if s.endswith("@") else r"(?![\w/])")
                                for s in sorted(stems, key=len, reverse=True)))
    bad = [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, hit.start()) + 1} names {hit[0]}"
           for name, path in _modules().items() if name.startswith(("trials", "analysis"))
           for text in [path.read_text()] for hit in found.finditer(text)]
    assert not bad, bad


def test_every_module_is_on_the_map():
    """docs/extending.md's Layout names every module of the three packages, a sub-package's
    modules in that sub-package's own entry (`  driver/  ...`): the map a newcomer reads is
    the house as it stands, folder by folder."""
    doc = (ROOT / "docs" / "extending.md").read_text()
    layout = doc[doc.index("## Layout"):]
    # each package's part of the map: from its `name/` line to the next top-level folder's
    parts = dict(re.findall(r"^(\w+)/ +(.*?)(?=^\w+/ |^```)", layout, re.S | re.M))
    # a sub-package's entry: from its `  sub/` line to the next entry of the same indent
    entry = re.compile(r"^  (\w+)/ +(.*?)(?=^  \S|\Z)", re.S | re.M)
    entries = {(package, sub): text for package, part in parts.items() for sub, text in entry.findall(part + "\n")}
    missing = []
    for name, path in _modules().items():
        dotted = name.split(".")
        if not name.startswith(("trials", "analysis", "dspark")) or path.name == "__init__.py":
            continue
        # a top-level module in its package's part outside every sub-package's entry
        where = entries.get((dotted[0], dotted[1]), "") if len(dotted) > 2 else \
            entry.sub("", parts.get(dotted[0], "") + "\n")
        if not re.search(r"(?<![\w/])" + re.escape(path.name) + r"\b", where):
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"not in docs/extending.md's Layout (its sub-package's entry, for one in a sub-package): {missing}"


COMMANDS = ("trials.cli", "trials.augment", "trials.reeval", "trials.recover", "trials.local", "trials.listing")


def test_the_engines_parts_import_no_command():
    """The engine's sub-packages are the parts its commands are made of, so arrows point from
    a command into them, never back: the driver's parts (`trials.driver`) import no command and
    no timing pass; the timing pass (`trials.timing`) imports no command but `trials.reeval`
    (the checkpoints it times are the ones a re-evaluation reads)."""
    bad = []
    for name, path in _modules().items():
        for module, names, line in _imports(name, path):
            for target in [module] + [f"{module}.{n}" for n in names]:  # `from trials import augment` too
                where = f"{path.relative_to(ROOT)}:{line} imports {target}"
                if name.startswith("trials.driver.") and (target in COMMANDS or target.startswith("trials.timing")):
                    bad.append(where)
                if name.startswith("trials.timing.") and target in COMMANDS and target != "trials.reeval":
                    bad.append(where)
    assert not bad, bad


# the statistics' modules that hand results to the rendering: the report's builder, the parent
# run's note (the store side) and the CLI
CALLS_RENDERING = ("analysis.report", "analysis.publish", "analysis.cli")


def test_the_rendering_is_a_room_the_statistics_do_not_enter():
    """`analysis/rendering/` renders what the statistics computed; no statistic imports it,
    so that a plan, a look or a verdict is computed alike with no renderer installed."""
    bad = [f"{path.relative_to(ROOT)}:{line} imports {module}" for name, path in _modules().items()
           if name.startswith("analysis") and not name.startswith("analysis.rendering") and name not in CALLS_RENDERING
           for module, _, line in _imports(name, path) if module.startswith("analysis.rendering")]
    assert not bad, bad
    assert (ROOT / "analysis" / "rendering" / "__init__.py").is_file()


# the one module of the statistics that drives the engine: `trials augment --until-decided`'s
# looks, which add blocks through `trials.augment` (the engine reaches it by an entry point)
DRIVES_THE_ENGINE = "analysis.until_decided"


def test_no_arrow_points_back_up_from_the_engine_to_the_statistics():
    """No module of the engine imports the statistics, at any depth; the looks of
    `--until-decided` are the statistics', found through the entry point group
    `dspark_sweeps.deciders`, and only they import the engine's augment."""
    up = [f"{path.relative_to(ROOT)}:{line} imports {module}" for name, path in _modules().items()
          if name.startswith("trials") for module, _, line in _imports(name, path) if module.split(".")[0] == "analysis"]
    assert not up, up
    driving = [f"{path.relative_to(ROOT)}:{line} imports {module}" for name, path in _modules().items()
               if name.startswith("analysis") and name != DRIVES_THE_ENGINE
               for module, _, line in _imports(name, path) if module in ("trials.augment", "trials.run_settings")]
    assert not driving, driving
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '[project.entry-points."dspark_sweeps.deciders"]' in pyproject
    assert f'= "{DRIVES_THE_ENGINE}:until_decided"' in pyproject


def test_no_import_cycle():
    """The project's modules form no cycle, counting every import (function-level and
    TYPE_CHECKING ones too): Tarjan's strongly connected components, each of one module."""
    graph = _edges()
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                cycles.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_no_private_name_crosses_modules():
    """No module takes another's `_private` name, by import or as `module._name`."""
    mods = _modules()
    bad = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        aliases = {}
        for module, names, line in _imports(name, path):
            if module.split(".")[0] not in PACKAGES:
                continue
            bad += [f"{path.relative_to(ROOT)}:{line} imports {module}.{n}" for n in names
                    if n.startswith("_") and not n.startswith("__") and f"{module}.{n}" not in mods]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    aliases[a.asname or a.name] = a.name
            elif isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split(".")[0]] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.attr.startswith("_") and not node.attr.startswith("__"):
                target = aliases.get(node.value.id, "")
                full = target if target in mods else next((m for m in mods if m.endswith("." + target)), "")
                if full and full != name:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not bad, bad


MLFLOW_TABLES = ("experiments", "experiment_tags", "runs", "tags", "params", "metrics", "latest_metrics",
                 "alembic_version", "datasets", "inputs", "trace_info")


def test_one_place_opens_mlflow_and_nothing_reads_its_tables():
    """Only `trials.store.client` builds an MLflow client, and no module of the project
    speaks SQL to MLflow's tables (its schema is MLflow's, migrated by MLflow)."""
    import re

    sql = re.compile(r"\b(FROM|JOIN|INTO|UPDATE|TABLE)\s+[`\"]?(" + "|".join(MLFLOW_TABLES) + r")\b", re.I)
    builders, readers = [], []
    for name, path in _modules().items():
        text = path.read_text()
        if re.search(r"\bMlflowClient\(", text) and name != "trials.store.client":
            builders.append(name)
        if "sqlite3" in text or sql.search(text) or "latest_metrics" in text or "alembic_version" in text:
            readers.append(name)
    assert not builders and not readers, (builders, readers)


HEAVY = ("ray", "torch", "mlflow", "matplotlib", "statsmodels", "scipy", "pandas", "numpy", "pyarrow", "nbclient",
         "nbformat", "sqlalchemy", "requests", "psutil", "yaml")


def _top_level_imports(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(module, the project's submodules taken from it) for each import at the file's top level."""
    mods = _modules()
    top = {n.lineno for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))}
    return [(m, [f"{m}.{n}" for n in names if f"{m}.{n}" in mods]) for m, names, line in _imports(name, path)
            if line in top]


def test_a_function_imports_the_project_only_to_put_off_a_heavy_dependency():
    """A function-level import of one of the project's modules is there for one reason: the
    module loads a heavy dependency (Ray, torch, MLflow, matplotlib, ...) that the importer
    does not, so a command that does not need it does not pay for it. Any other goes at the
    top of the file, where a reader sees the graph."""
    mods = _modules()
    heavy: dict[str, set] = {}

    def weight(name: str) -> set:
        if name not in heavy:
            heavy[name] = set()
            for module, subs in _top_level_imports(name, mods[name]):
                if module.split(".")[0] in HEAVY:
                    heavy[name].add(module.split(".")[0])
                for target in [module, *subs]:
                    if target in mods and target != name:
                        heavy[name] |= weight(target)
        return heavy[name]

    bad, lines = [], {name: path.read_text().splitlines() for name, path in mods.items()}
    for name, path in mods.items():
        top = {line for _, _, line in _imports(name, path)} - {
            n.lineno for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))}
        for module, names, line in _imports(name, path):
            if line not in top or module.split(".")[0] not in PACKAGES or "#" in lines[name][line - 1]:
                continue
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in mods] or [module]
            if all(t in mods and not (weight(t) - weight(name)) for t in targets):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module} in a function (nothing heavy)")
    assert not bad, bad
