"""Every shipped sweep spec and cluster.yaml loads and validates."""

import json
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml

from trials import validate

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "sweeps").glob("*.yaml"))


def test_the_four_sweeps_ship():
    assert {p.name for p in SPECS} >= {"demo.yaml", "d1-d2-d9.yaml", "seed-backbone.yaml", "head-and-block.yaml"}


@pytest.mark.parametrize("path", SPECS, ids=[p.name for p in SPECS])
def test_shipped_spec_validates(path):
    s = validate.load_spec(path)
    assert s.name == path.stem
    assert len(s.trials) == len({t.key for t in s.trials})


def test_demo_is_the_seed_factorial_on_cpu():
    """`make demo` answers both questions: the paper's architecture (demo) and the seed's
    system (demo-seed), each on CPU."""
    seed = validate.load_spec(ROOT / "sweeps" / "demo-seed.yaml")
    assert all(t.config.parallel_stage == "backbone" and t.config.head == "rnn" and t.config.block_size == 4
               for t in seed.trials)
    assert any(t.arm.startswith("control") and t.config.aux_weight == 0 for t in seed.trials)
    s = validate.load_spec(ROOT / "sweeps" / "demo.yaml")
    # 4 blocks: a term's own block x term error needs 3 df; a half fraction keeps make demo short
    assert set(s.factors) == {"D1", "D2", "D9"} and s.replicates == 4 and s.design == "2^(3-1)"
    assert seed.replicates == 4 and len({t.cell for t in s.trials}) == 4
    assert all(t.config.preset in ("tiny", "small") and t.config.parallel_stage == "drafter" for t in s.trials)
    assert s.resources.get("gpu", 0) == 0


def test_seed_backbone_has_the_pure_ce_control():
    s = validate.load_spec(ROOT / "sweeps" / "seed-backbone.yaml")
    controls = [t for t in s.trials if t.arm.startswith("control")]
    assert controls and all(t.config.aux_weight == 0 for t in controls)
    assert set(s.factors["D1"]) == {"shifted", "ids_only", "aligned"}
    # the seed's settings: RNN head, K = 4, strided anchors every 16, aux weight 0.1
    factorial = [t for t in s.trials if t.arm == "factorial"]
    assert all(t.config.head == "rnn" and t.config.block_size == 4 and t.config.anchors == "strided"
               and t.config.stride == 16 and t.config.aux_weight == 0.1 for t in factorial)
    # D2 is alive: the two levels resolve to different decay denominators
    assert {t.config.native().decay_denominator for t in factorial} == {4.0, 7.0}
    assert "seed's system" in s.description


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


def test_the_cluster_path_has_what_it_needs():
    """`ray job submit` needs Ray's job server (ray[default]) on the head, which cluster.yaml
    installs with the project; every node starts with token authentication."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ray_dep = next(d for d in deps if d.startswith("ray["))
    assert "default" in ray_dep.split("]")[0] and "tune" in ray_dep.split("]")[0]
    cfg = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in cfg[key] if "ray start" in c]
        assert starts and all(c.startswith("RAY_AUTH_MODE=token ") for c in starts)
    assert any(k.endswith(".ray/auth_token") for k in cfg["file_mounts"])


def test_the_demo_specs_declare_a_sequential_plan_before_their_first_look():
    """The report's printed next step (augment) must not turn the demo's next look post hoc."""
    for name in ("demo.yaml", "demo-seed.yaml", "seed-questions.yaml", "head-and-block.yaml"):
        s = validate.load_spec(ROOT / "sweeps" / name)
        assert s.sequential.get("max_replicates", 0) > s.replicates and s.responses, name
