"""DSpark as a workload of the sweep engine: everything `trials` and `analysis` need of the
DSpark trainer, in the shape of `trials.workload`'s interface.

This module imports nothing of `trials` (the interface is structural), and nothing heavy
at import: torch and the trainer load only when a hook that trains, evaluates or times is
called, so that the engine's reading commands and the statistics load the registry alone.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from . import metrics as metric_registry
from .config import Config, from_dict, roles, smoke_overrides

DECODING = ("spec/", "conf/", "sched/")  # responses measured by decoding prompts

# the question each stage's sweep answers (README "Two questions")
QUESTIONS = {
    "backbone": "the seed's system: which of D1, D2, D9 moves the jointly trained LM's bits per byte and "
                "the head's teacher-forced acceptance",
    "drafter": "the paper's system: which of the changes moves a separate drafter's acceptance, speedup and "
               "confidence calibration",
}


class SharedTarget:
    """DSpark's shared artifact: the frozen target LM of a drafter-stage sweep, trained once
    per (target config, corpus) and read by every trial (`dspark.targets`)."""

    def needed(self, cfg: Config) -> bool:
        return cfg.parallel_stage == "drafter" and not cfg.target_path

    def address(self, cfg: Config, cache: dict) -> tuple[str, dict[str, str]]:
        from . import targets

        h, sha = targets.address(cfg, cache)
        return h, {"target_hash": h, "data_sha256": sha}

    def file(self, storage, key: str) -> Path:
        return Path(storage) / "targets" / f"{key}.pt"

    def read(self, path) -> dict:
        from .targets import load_target

        return load_target(path)[1]

    def train(self, config: dict, path: str, progress_file: str | None = None) -> dict:
        from .train import train_shared_target

        return train_shared_target(config, path, progress_file)

    def describe(self, cfg: Config) -> str:
        return f"{cfg.target_steps} steps of the {cfg.preset} LM"

    def bind(self, cfg: Config, path: str) -> Config:
        return cfg.replace(target_path=str(path))


class Timing:
    """The timing pass's DSpark part (`dspark.timed`)."""
    response = {"drafter": "spec/speedup", "backbone": "train/step_ms"}
    size = {"drafter": "prompts", "backbone": "steps"}  # what one repetition holds

    def needs_checkpoints(self, stage: str) -> bool:
        return stage == "drafter"  # a backbone step is the configuration's, not the weights'

    def arms(self, stage: str, configs: dict, checkpoints: dict, settings, tmp: str):
        from . import timed

        return timed.arms(stage, configs, checkpoints, settings, tmp)

    def values(self, stage: str, rounds: list[dict]) -> dict[str, float]:
        from . import timed

        return timed.values(stage, rounds)

    def items(self, stage: str, rounds: list[dict]) -> dict[str, dict[str, dict]]:
        from . import timed

        return timed.items(stage, rounds)


class DSparkWorkload:
    """The four core attributes (`name`, `config`, `train`, `metrics`) and the optional
    capabilities DSpark has, each as `trials.workload` documents it."""
    name = "dspark"
    config = Config  # its fields and defaults (the tiny preset); `make_config` resolves a preset
    metrics = {m.name: m.better for m in metric_registry.REGISTRY if m.better in ("higher", "lower")}
    metric_rows = metric_registry  # the richer rows: stages, degenerate or constant arms, headline, timed
    roles = roles()
    variant_field = "parallel_stage"
    sequential_fields = {"max_prompts": "spec_prompts", "max_eval_batches": "eval_batches"}
    checkpoint_file = "state.pt"
    final_checkpoint = "checkpoint"  # the folder under out_dir holding the run's last checkpoint
    reeval_counts = {"spec_prompts": "prompts", "eval_batches": "held-out batches"}  # `trials reeval --FIELD N`
    reeval_limits = {"spec_prompts": 4096, "eval_batches": 4096}  # beyond: hours a trial, and memory a worker
    questions = QUESTIONS
    notebooks = str(Path(__file__).resolve().parent / "notebooks")  # `analysis notebook acceptance_curves`
    shared = SharedTarget()
    timing = Timing()

    def make_config(self, values: dict) -> Config:
        """A preset and the fields a spec sets over it (`dspark.config.from_dict`)."""
        return from_dict(values)

    def objective(self, cfg: Config) -> dict:
        """What a run's results depend on, each field as it resolves (`Config.objective_dict`)."""
        return cfg.objective_dict()

    def smoke(self) -> dict:
        return smoke_overrides()

    def variant(self, cfg: Config) -> str:
        return cfg.parallel_stage

    def unmeasured(self, cfg: Config, name: str) -> str | None:
        """Why an arm cannot give a response beyond what the registry says of its stage: a
        decoding response where no prompt is decoded."""
        if name.startswith(DECODING) and cfg.spec_prompts == 0:
            return "spec_prompts is 0, so no prompt is decoded"
        return None

    def config_problems(self, cfg: Config) -> list[str]:
        """What a config names that is not there: a `target_path` that is not a target
        `dspark` saved (loaded with weights_only=True, as the trainer will)."""
        if not cfg.target_path:
            return []
        from .targets import load_target

        try:
            load_target(cfg.target_path)
        except ValueError as e:
            return [str(e)]
        return []

    def train(self, cfg: Config, context) -> dict:
        """One trial: `context` reports (`context(metrics, checkpoint_dir, items=...)`) and says
        where a stopped trial resumes from (`trials.workload_defaults.TrainContext`)."""
        from .train import train

        return train(cfg, report=context, resume_from=context.resume_from, before_step=context.before_step)

    def checkpoint_bytes(self, cfg: Config) -> int:
        """About the size of one checkpoint of a trial: fp32 weights of the target, drafter
        and head, with Adam's two moments for the trained part, plus a margin for plots and files."""
        d, L = cfg.d_model, cfg.n_layers
        target = 12 * L * d * d + 2 * 256 * d
        draft = 12 * cfg.drafter_layers * d * d + 2 * 256 * d + 2 * cfg.markov_rank * 256
        return int(4 * (target + 3 * (target + draft)) + 8e6)

    def checkpoint_problem(self, folder) -> str | None:
        from .checkpoint import checkpoint_problem

        return checkpoint_problem(folder)

    def finished_problem(self, folder, cfg: Config) -> str | None:
        """Why a checkpoint cannot be re-evaluated or timed as a finished trial's (loaded
        weights_only, its tensors memory-mapped, not read), or None."""
        from .checkpoint import read_checkpoint

        try:
            state = read_checkpoint(folder, cfg, mmap=True)
        except ValueError as e:
            return str(e).removeprefix("resume: ")
        if state["stage"] != "done":
            return f"{folder} is not a finished trial's checkpoint (stage {state['stage']})"
        return None

    def reeval_problem(self, cfg: Config, counts: dict[str, int]) -> str | None:
        """Why `trials reeval` cannot give a trial what is asked (None: it can)."""
        if "spec_prompts" in counts and cfg.parallel_stage != "drafter":
            return "it has backbone-stage trials, which decode nothing (--spec-prompts); --eval-batches re-measures them"
        return None

    def reevaluate(self, config: dict, checkpoint_dir: str, counts: dict[str, int]) -> tuple[dict, dict, dict]:
        """(metrics, files, items) of one trial's final checkpoint evaluated on
        `counts["eval_batches"]` held-out batches and `counts["spec_prompts"]` decoded prompts
        (either may be absent); the files, where prompts were decoded, are the per-prompt
        statistics (`per_prompt_<N>.json`) and the recorded rounds (`rounds_<N>.npz`)."""
        from .speculative_eval import PER_PROMPT_FILE, ROUNDS_FILE
        from .train import Trainer

        out, files = {}, {}
        n_prompts, n_batches = counts.get("spec_prompts", 0), counts.get("eval_batches", 0)
        with tempfile.TemporaryDirectory(prefix="dspark-reeval-") as tmp:
            trainer = Trainer(from_dict({**config, "out_dir": tmp}))
            trainer.load_checkpoint(checkpoint_dir)
            trainer.items = {}  # the checkpoint's own: only this evaluation's items go back
            if trainer.stage != "done":
                raise ValueError(f"reeval: {checkpoint_dir} is not a finished trial's checkpoint "
                                 f"(stage {trainer.stage})")
            if n_batches:
                out.update(trainer.evaluate(final=True, batches=trainer.held_out(n_batches)))
            if n_prompts:
                out.update(trainer.speculative(n_prompts, full=True))
                made = Path(tmp) / "artifacts"
                files[f"per_prompt_{n_prompts}.json"] = (made / PER_PROMPT_FILE).read_bytes()
                files[f"rounds_{n_prompts}.npz"] = (made / ROUNDS_FILE).read_bytes()
        return out, files, trainer.items


WORKLOAD = DSparkWorkload()
