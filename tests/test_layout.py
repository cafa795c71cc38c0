"""The layout's rules, checked: no function over 50 lines, and `analysis` imports no
`trials` and no renderer where it only computes (`plan`)."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_function_is_over_50_lines():
    long = []
    for package in ("dspark", "trials", "analysis", "bench"):
        for path in sorted((ROOT / package).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > 50:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def test_the_reading_side_loads_no_ray_torch_or_renderer():
    """`trials status` and `list` read through trials.saved (no Ray, Tune or torch) and the
    store through dspark.reader (no MLflow); `analysis plan` imports statistics only (no
    matplotlib, no renderer)."""
    code = ("import sys; import trials.saved, trials.cli, analysis.plan, analysis.load, dspark.reader\n"
            "print(sorted(m for m in ('ray', 'torch', 'mlflow', 'matplotlib', 'analysis.render', 'analysis.plots') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_readme_is_short_and_its_annotated_spec_is_a_valid_spec():
    """A newcomer's README: one screenful of contents, under 300 lines, each linked document
    present; its annotated spec is the same as the shipped one it shortens (validated like
    any spec)."""
    import re

    import yaml

    from trials.spec import parse

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
