"""A second workload for the sweep engine, to prove that `trials` and `analysis` know no
DSpark: a tiny MLP classifying points of a fixed Gaussian mixture, with two switchable
changes, `norm` (LayerNorm on the hidden layer or none) and `label_smoothing` (0 or 0.1).
A trial trains in a few seconds on one core. It satisfies `trials.workload`'s interface
structurally, as `dspark.workload` does; a spec names it `workload: tests.toy.workload:WORKLOAD`.

It shares no artifact and has no timing pass (`shared = timing = None`); its checkpoints
are `checkpoint_<step>/state.pt` (tensors and numbers, loaded with weights_only=True).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

DIM, CLASSES = 8, 4
ROLES = {"seed": "objective", "steps": "budget", "lr": "objective", "hidden": "objective", "norm": "objective",
         "label_smoothing": "objective", "eval_interval": "evaluation", "eval_batches": "evaluation",
         "step_sleep_ms": "plumbing", "hold": "plumbing", "out_dir": "plumbing"}


@dataclass(frozen=True)
class ToyConfig:
    seed: int = 0
    steps: int = 120
    lr: float = 0.05
    hidden: int = 32
    norm: str = "none"  # "none" | "layer"
    label_smoothing: float = 0.0
    eval_interval: int = 40
    eval_batches: int = 4
    step_sleep_ms: float = 0.0  # slows a step down, so that a test can stop a sweep mid-way
    hold: str = ""  # a folder: every trial but the first to start waits until <hold>/open exists (a test's gate)
    out_dir: str = "toy-out"

    def __post_init__(self):
        if self.norm not in ("none", "layer"):
            raise ValueError(f"norm: 'none' or 'layer', got {self.norm!r}")
        for name in ("steps", "hidden", "eval_interval", "eval_batches"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: an integer >= 1, got {v!r}")
        if not 0.0 <= float(self.label_smoothing) < 1.0:
            raise ValueError(f"label_smoothing: in [0, 1), got {self.label_smoothing!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "ToyConfig":
        return dataclasses.replace(self, **changes)

    def objective_dict(self) -> dict:
        return {k: v for k, v in self.to_dict().items() if ROLES[k] != "plumbing"}


@dataclass(frozen=True)
class Row:
    name: str
    better: str
    unit: str
    stages: tuple[str, ...] = ("mlp",)
    meaning: str = ""
    degenerate_in: dict | None = None
    constant_in: dict | None = None
    headline: bool = False
    timed: bool = False


class Metrics:
    REGISTRY = (Row("val/acc", "higher", "fraction", meaning="held-out accuracy", headline=True),
                Row("val/loss", "lower", "nats", meaning="held-out cross-entropy", headline=True),
                Row("train/loss", "lower", "nats", meaning="the last step's training loss"))
    DEFAULT_RESPONSES = {"mlp": ("val/acc", "val/loss")}

    def lookup(self, name: str):
        return next((r for r in self.REGISTRY if r.name == name), None)


def _batch(gen, n: int = 64):
    """(x, y): n points of the mixture whose class means are fixed by seed 1234."""
    import torch

    means = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(1234))
    y = torch.randint(0, CLASSES, (n,), generator=gen)
    return means[y] + 0.9 * torch.randn(n, DIM, generator=gen), y  # (n, DIM), (n,)


def _wait_unless_first(gate: Path) -> None:
    """The first trial to start goes on; every later one waits until `gate`/open exists, so a
    test sees one finished trial beside a running one by their states, never by the clock."""
    gate.mkdir(parents=True, exist_ok=True)
    try:
        (gate / "first").open("x").close()
        return
    except FileExistsError:
        pass
    while not (gate / "open").exists():
        time.sleep(0.2)


def _model(cfg: ToyConfig):
    import torch

    norm = torch.nn.LayerNorm(cfg.hidden) if cfg.norm == "layer" else torch.nn.Identity()
    return torch.nn.Sequential(torch.nn.Linear(DIM, cfg.hidden), norm, torch.nn.ReLU(),
                               torch.nn.Linear(cfg.hidden, CLASSES))


def _evaluate(model, batches: int, seed: int) -> dict:
    import torch

    gen = torch.Generator().manual_seed(10_000 + seed)
    with torch.no_grad():
        parts = [_batch(gen) for _ in range(batches)]
        logits = [model(x) for x, _ in parts]
        loss = sum(torch.nn.functional.cross_entropy(lg, y).item() for lg, (_, y) in zip(logits, parts)) / batches
        acc = sum((lg.argmax(-1) == y).float().mean().item() for lg, (_, y) in zip(logits, parts)) / batches
    return {"val/acc": acc, "val/loss": loss}


class ToyWorkload:
    name = "toy"
    config = ToyConfig
    metrics = {"val/acc": "higher", "val/loss": "lower", "train/loss": "lower"}
    metric_rows = Metrics()
    roles = ROLES
    variant_field = ""  # one variant: every arm measures every response
    sequential_fields = {"max_eval_batches": "eval_batches"}
    checkpoint_file = "state.pt"
    final_checkpoint = "checkpoint"
    reeval_counts = {"eval_batches": "held-out batches"}
    shared = None
    timing = None
    questions = {"mlp": "does LayerNorm or label smoothing move a tiny MLP's held-out accuracy?"}

    def smoke(self) -> dict:
        return {"steps": 20, "eval_interval": 10}

    def variant(self, cfg: ToyConfig) -> str:
        return "mlp"

    def unmeasured(self, cfg: ToyConfig, name: str) -> str | None:
        return None

    def config_problems(self, cfg: ToyConfig) -> list[str]:
        return []

    def checkpoint_bytes(self, cfg: ToyConfig) -> int:
        return 1_000_000

    def train(self, cfg: ToyConfig, context) -> dict:
        import torch

        torch.manual_seed(cfg.seed)
        model = _model(cfg)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        gen, start = torch.Generator().manual_seed(cfg.seed), 0
        if context.resume_from:
            state = torch.load(Path(context.resume_from) / self.checkpoint_file, weights_only=True)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            gen.set_state(state["gen"])
            start = int(state["step"])
        if cfg.hold:
            _wait_unless_first(Path(cfg.hold))
        out, last = {}, float("nan")
        for step in range(start + 1, cfg.steps + 1):
            context.before_step(step, bool(context.resume_from))
            x, y = _batch(gen)
            loss = torch.nn.functional.cross_entropy(model(x), y, label_smoothing=cfg.label_smoothing)
            opt.zero_grad()
            loss.backward()
            opt.step()
            last = loss.item()
            time.sleep(cfg.step_sleep_ms / 1000.0)
            if step % cfg.eval_interval == 0 or step == cfg.steps:
                out = {"step": step, "train/loss": last, **_evaluate(model, cfg.eval_batches, cfg.seed)}
                folder = self._save(cfg, model, opt, gen, step)
                context(dict(out), str(folder))
        return out

    def _save(self, cfg: ToyConfig, model, opt, gen, step: int) -> Path:
        import torch

        state = {"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(), "step": step,
                 "done": step == cfg.steps}
        folder = Path(cfg.out_dir) / (self.final_checkpoint if step == cfg.steps else f"checkpoint_{step}")
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(state, folder / self.checkpoint_file)
        return folder

    def checkpoint_problem(self, folder) -> str | None:
        import torch

        try:
            torch.load(Path(folder) / self.checkpoint_file, weights_only=True)
        except Exception as e:  # a missing or cut file: torch raises several kinds
            return f"{folder}: not a toy checkpoint ({type(e).__name__})"
        return None

    def finished_problem(self, folder, cfg: ToyConfig) -> str | None:
        import torch

        problem = self.checkpoint_problem(folder)
        if problem is None and not torch.load(Path(folder) / self.checkpoint_file, weights_only=True)["done"]:
            problem = f"{folder} is not a finished trial's checkpoint"
        return problem

    def reevaluate(self, config: dict, checkpoint_dir: str, counts: dict[str, int]):
        import torch

        cfg = ToyConfig(**config)
        model = _model(cfg)
        model.load_state_dict(torch.load(Path(checkpoint_dir) / self.checkpoint_file, weights_only=True)["model"])
        return _evaluate(model, counts["eval_batches"], cfg.seed), {}


WORKLOAD = ToyWorkload()


# ---------------------------------------------------------------- a timed variant

STEP_MS = {"none": 10.0, "layer": 10.05}  # the timed response's true values: norm's cost, 0.05 ms a step


class _CountedSteps:
    """The timing pass's arms: a repetition's "seconds" a step, computed from the config, never
    from the clock (each run's seed shifts it a little, as a seed's compile or layout would),
    so that a test of the pass's users is the same on any machine, however loaded."""

    def __init__(self, configs: dict[str, dict], steps: int, seed: int):
        self.configs, self.steps, self.seed = configs, steps, seed

    def run(self, key: str, whole: bool = True) -> dict[str, list[float]]:
        cfg = ToyConfig(**self.configs[key])
        # each run's own offset (its seed and arm, as a run's layout would), and the pass's seed moving every
        # value alike, so that a pass run again gives other values, as on a machine
        digest = hashlib.sha256(repr(sorted(cfg.objective_dict().items())).encode()).digest()
        run = int.from_bytes(digest[:4], "little") / 2 ** 32 - 0.5
        ms = STEP_MS[cfg.norm] + 0.2 * run + 0.01 * self.seed
        return {"step_s": [ms / 1000.0] * (self.steps if whole else 1)}


class ToyTiming:
    """`trials time` for the timed toy: `train/step_ms`, S steps a repetition."""
    response = {"mlp": "train/step_ms"}
    size = {"mlp": "steps"}

    def needs_checkpoints(self, variant: str) -> bool:
        return False

    def arms(self, variant: str, configs: dict, checkpoints: dict, settings, tmp: str):
        return _CountedSteps(configs, settings.steps, settings.seed)

    def values(self, variant: str, rounds: list[dict]) -> dict[str, float]:
        return {k: 1000.0 * sum(sum(r["times"][k]["step_s"]) for r in rounds)
                / sum(len(r["times"][k]["step_s"]) for r in rounds) for k in rounds[0]["times"]}

    def items(self, variant: str, rounds: list[dict]) -> dict:
        return {}


class TimedMetrics(Metrics):
    REGISTRY = Metrics.REGISTRY + (Row("train/step_ms", "lower", "ms", meaning="a training step's time, from the "
                                       "timing pass", timed=True),)


class TimedToyWorkload(ToyWorkload):
    """The toy with a timing pass (`ToyTiming`): a workload whose timed response the engine's
    follow-up path (`plan --confirm`, `augment --until-decided`) can be tested on anywhere."""
    name = "toy-timed"
    metrics = {**ToyWorkload.metrics, "train/step_ms": "lower"}
    metric_rows = TimedMetrics()
    timing = ToyTiming()


TIMED = TimedToyWorkload()
