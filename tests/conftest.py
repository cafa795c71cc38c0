import os

import pytest

# Keep BLAS/torch from oversubscribing the 2-core CI machine.
os.environ.setdefault("OMP_NUM_THREADS", "2")
# MKL's results may otherwise depend on memory alignment: resume-equality tests compare
# two runs in one process bit for bit (must be set before torch loads MKL).
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
# The toy workload is no installed plug-in: the tests allow it by name, as a user allows their own
# (trials/workload.py); sweeps read back from storage name it, and would be refused otherwise.
os.environ.setdefault("DSPARK_SWEEPS_WORKLOADS", "tests.toy.workload:WORKLOAD")
# the workloads a user ran are kept in their own config folder (trials/workload.py): the tests'
# in one of their own, never the user's
os.environ["XDG_CONFIG_HOME"] = __import__("tempfile").mkdtemp(prefix="dspark-tests-config-")


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


# the drafter's two targets: the byte LM and a Hugging Face causal LM (dspark/hf_target.py), one
# interface; a suite parametrised over TARGETS runs on both
TARGETS = ("byte", "hf")


def target_overrides(kind: str) -> dict:
    """The config fields that make `tiny` draft for `kind`'s target (the HF one needs the `hf`
    extra, which make test and .ci/run install: skipped where it is missing)."""
    if kind == "byte":
        return {}
    pytest.importorskip("transformers")
    return {"target_model": "qwen3-tiny", "n_layers": 4, "context_layers": (1, 2)}


# metrics that depend on wall-clock timings, so vary from run to run (test comparisons skip them)
TIMING_KEYS = ("tokens_per_s", "_ms", "speedup", "throughput", "seq_frac", "sched/alg1", "decode_s")


def is_timing_metric(name: str) -> bool:
    return any(key in name for key in TIMING_KEYS)


@pytest.fixture
def mount(tmp_path):
    """A tmpfs of a given size mounted at a folder (root only), unmounted afterwards."""
    import subprocess
    from pathlib import Path

    made = []

    def make(size_mb: int, read_only: bool = False) -> Path:
        where = tmp_path / f"mnt{len(made)}"
        where.mkdir()
        opts = f"size={size_mb}m" + (",ro" if read_only else "")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'not root'})")
        made.append(where)
        return where

    yield make
    for where in made:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill_up(folder, leave: int = 0) -> None:
    """Fill a small mount's free space, but for about `leave` bytes, with `filler`: written a
    chunk at a time, so that a driver writing on the same mount meanwhile cannot make the
    filling itself fail."""
    chunk = b"\0" * 65536
    with open(folder / "filler", "wb") as f:
        try:
            while True:
                st = os.statvfs(folder)
                room = st.f_bavail * st.f_frsize - leave
                if room <= 0:
                    break
                f.write(chunk[:min(room, len(chunk))])
                f.flush()
        except OSError:  # no space left: full
            pass
