"""Every shipped sweep spec and cluster.yaml loads and validates."""

import json
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml

from trials import spec as specmod

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "sweeps").glob("*.yaml"))


def test_the_four_sweeps_ship():
    assert {p.name for p in SPECS} >= {"demo.yaml", "d1-d2-d9.yaml", "seed-backbone.yaml", "head-and-block.yaml"}


@pytest.mark.parametrize("path", SPECS, ids=[p.name for p in SPECS])
def test_shipped_spec_validates(path):
    s = specmod.load(path)
    assert s.name == path.stem
    assert len(s.trials) == len({t.key for t in s.trials})


def test_demo_is_the_seed_factorial_on_cpu():
    s = specmod.load(ROOT / "sweeps" / "demo.yaml")
    assert set(s.factors) == {"D1", "D2", "D9"} and s.replicates == 2 and s.design == "full"
    assert all(t.config.preset in ("tiny", "small") and t.config.parallel_stage == "drafter" for t in s.trials)
    assert s.resources.get("gpu", 0) == 0


def test_seed_backbone_has_the_pure_ce_control():
    s = specmod.load(ROOT / "sweeps" / "seed-backbone.yaml")
    controls = [t for t in s.trials if t.arm.startswith("control")]
    assert controls and all(t.config.aux_weight == 0 for t in controls)
    assert set(s.factors["D1"]) == {"shifted", "ids_only", "aligned"}


def test_cluster_yaml_matches_rays_schema_and_stays_private():
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    text = (ROOT / "cluster.yaml").read_text()
    cfg = yaml.safe_load(text)
    jsonschema.validate(cfg, schema)
    types = cfg["available_node_types"]
    head = types[cfg["head_node_type"]]
    workers = [t for n, t in types.items() if n != cfg["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    assert any(w["resources"].get("GPU", 0) >= 1 and w.get("max_workers", 0) > w.get("min_workers", 0)
               for w in workers)
    assert any("pip install" in c and "-e ." in c for c in cfg["setup_commands"])
    start = " ".join(cfg["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in start and "0.0.0.0" not in text
    assert "ray job submit --working-dir . -- trials run sweeps/d1-d2-d9.yaml --address auto" in text.replace(
        "\\\n#       ", "")
