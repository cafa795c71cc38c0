import pytest
import ray
import yaml


@pytest.fixture(scope="module")
def ray_local():
    # "local": a Ray of its own, never one that `ray start` left on the machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def write_spec(path, corpus_dir, name, factors, **extra):
    raw = {"name": name, "base": {"preset": "tiny", "data": [str(corpus_dir)], **extra.pop("base", {})},
           "factors": factors, "replicates": extra.pop("replicates", 1), "max_concurrent": 2, **extra}
    path.write_text(yaml.safe_dump(raw))
    return path


D1_D9 = {
    "D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}},
    "D9": {"hidden": {"confidence_input": "hidden"}, "markov": {"confidence_input": "hidden+markov"}},
}


QUICK_BASE = {"target_steps": 6, "eval_interval": 3, "eval_batches": 1, "spec_prompts": 0, "seq_len": 64,
              "max_corpus_bytes": 300000}


@pytest.fixture(scope="session")
def quick_target(tmp_path_factory, corpus_dir):
    """A target LM for quick_spec's sweeps, trained once for the session in this process
    rather than once per sweep in a Ray task and logged over HTTP: the tracking-server tests
    are about what happens to the trials (about 15 s each less). The shared target's own
    path is tested by the sweeps that train theirs: tests/trials/test_runner.py, the fault
    tests of tests/trials/test_team.py and the rest."""
    from dspark.train import train_shared_target

    path = tmp_path_factory.mktemp("quick-target") / "target.pt"
    train_shared_target({"preset": "tiny", "data": [str(corpus_dir)], **QUICK_BASE}, path)
    return path


def quick_spec(tmp_path, corpus_dir, name, draft_steps=6, replicates=1, target=None):
    """A 2-cell sweep (D1) of a few tiny steps with no decoding, one trial at a time: the
    CLI-level fault tests' sweep. `target`: a trained target (quick_target) its trials load,
    so that the sweep trains none."""
    base = {**QUICK_BASE, "draft_steps": draft_steps, **({"target_path": str(target)} if target else {})}
    return write_spec(tmp_path / f"{name}.yaml", corpus_dir, name,
                      {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}},
                      base=base, replicates=replicates, max_concurrent=1)


def ray_sessions() -> set:
    """The Ray sessions this machine has started (a folder each under Ray's /tmp/ray): a
    command that started a Ray of its own adds one; one refused before Ray starts adds none."""
    from pathlib import Path

    return set(Path("/tmp/ray").glob("session_2*"))

