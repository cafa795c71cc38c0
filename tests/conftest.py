import os

import pytest

# Keep BLAS/torch from oversubscribing the 2-core CI machine.
os.environ.setdefault("OMP_NUM_THREADS", "2")
# MKL's results may otherwise depend on memory alignment: resume-equality tests compare
# two runs in one process bit for bit (must be set before torch loads MKL).
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory):
    """A small deterministic corpus of text files (fast to hash and split)."""
    import sysconfig
    from pathlib import Path

    root = tmp_path_factory.mktemp("corpus")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    names = sorted(p for p in stdlib.glob("*.py"))[:60]
    for p in names:
        (root / p.name).write_bytes(p.read_bytes())
    return root


def tiny(**overrides):
    from dspark.config import from_dict

    base = dict(preset="tiny", target_steps=20, draft_steps=20, eval_interval=10, eval_batches=1,
                batch_size=4, seq_len=64, spec_prompts=0, max_corpus_bytes=400_000)
    base.update(overrides)
    return from_dict(base)


# metrics that depend on wall-clock timings, so vary from run to run (test comparisons skip them)
TIMING_KEYS = ("tokens_per_s", "_ms", "speedup", "throughput", "seq_frac", "sched/alg1", "decode_s")


def is_timing_metric(name: str) -> bool:
    return any(key in name for key in TIMING_KEYS)
