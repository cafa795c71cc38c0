"""A YAML document read as input (a spec, or a screening's spec a confirmation copies): an alias
bomb, nesting past a depth and a key given twice are refused in one line before anything reads
it. Plain YAML and strings: importing it loads neither MLflow nor torch."""

from __future__ import annotations

from typing import Any

import yaml


class YamlRefused(ValueError):
    """A YAML document refused before it is read (one line: why)."""


MAX_SPEC_BYTES = 1_000_000  # a spec file larger than this is not a spec
MAX_YAML_DEPTH = 32  # a spec's deepest nesting is about 6 (factors: level: field: value)
MAX_YAML_NODES = 100_000  # the spec's YAML with every alias expanded (refuses alias bombs)


def safe_yaml(text: str) -> Any:
    """`yaml.safe_load`, after walking the document's nodes with every alias expanded: an
    alias bomb (a few lines whose aliases nest to billions of nodes), nesting deeper than
    MAX_YAML_DEPTH and a key given twice in one mapping (YAML keeps the last, silently) are
    refused before anything reads it."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise YamlRefused(f"its YAML nests deeper than {MAX_YAML_DEPTH} levels") from None
    if root is None:
        return None
    sizes: dict[int, int] = {}

    def size(node, depth: int) -> int:  # memoised on the node, so shared (aliased) nodes are counted cheaply
        if depth > MAX_YAML_DEPTH:
            raise YamlRefused(f"its YAML nests deeper than {MAX_YAML_DEPTH} levels")
        if id(node) not in sizes:
            sizes[id(node)] = -1  # a recursive alias (a node that holds itself) counts as too big
            if isinstance(node, yaml.MappingNode):
                _no_duplicate_keys(node)
                n = 1 + sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
            elif isinstance(node, yaml.SequenceNode):
                n = 1 + sum(size(v, depth + 1) for v in node.value)
            else:
                n = 1
            sizes[id(node)] = n
        n = sizes[id(node)]
        return MAX_YAML_NODES + 1 if n < 0 else min(n, MAX_YAML_NODES + 1)

    if size(root, 0) > MAX_YAML_NODES:
        raise YamlRefused(f"its YAML expands to more than {MAX_YAML_NODES} nodes (aliases nested too deep)")
    return yaml.safe_load(text)


def _no_duplicate_keys(node) -> None:
    seen: dict[str, int] = {}
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode):
            line = key.start_mark.line + 1
            if key.value in seen:
                raise YamlRefused(f"the key {key.value[:60]!r} is given twice in one mapping (lines {seen[key.value]} "
                                  f"and {line}); YAML would keep the last one silently")
            seen[key.value] = line
