"""The DSpark trainer: `train(config, report=...)`.

Drafter stage (the paper): stage 1 trains the target LM on bytes (or loads it from
`target_path`), stage 2 freezes it and trains the parallel drafter, the sequential head
and the confidence head on the DSpark loss. Backbone stage (the seed's wiring): one stage
in which the LM trains on CE_lm + aux_weight * L_dspark with its own hidden states and
logits as the parallel stage. Both stages train through `Trainer.step`, one optimizer
step on a batch, which the benches and the timing pass time too.

Every `eval_interval` steps the trainer evaluates, writes a checkpoint holding the whole
state (models, optimizer, scheduler, RNG streams, data position; its format is
`dspark.checkpoint`) and calls `report(metrics, checkpoint_dir)`. A run resumed from a
checkpoint ends with the same final metrics as one that never stopped (exactly, on CPU).
Knows nothing of Ray or MLflow.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .blocks import Models, draft_blocks, trainable_parameters
from .checkpoint import read_checkpoint, write_checkpoint
from .config import VOCAB_SIZE, Config, from_dict
from .curves import describe_curve
from .artifacts import training_curves
from .data import Corpus, build_corpus, held_out_batches, sample_batch, sample_starts, windows
from .feature_cache import FeatureCache, FeatureKey, weights_hash
from .evaluate import lm_bpb, teacher_forced
from .heads import DraftHead
from .loss import dspark_loss
from .hf_target import HFTarget, is_given
from .model import Drafter, TargetLM, TargetOutput, sync
from .targets import load_target, save_target, target_hash, write_atomic
from .windows import random_anchors, strided_anchors
from .speculative_eval import evaluate_speculative

# report(metrics, checkpoint_dir[, items={response: {"items": n, "without": [...]}}]): the
# engine's callback; a final evaluation hands over its items (`evaluate.jackknife`,
# `speculative_eval.evaluation_records`), the others none
Report = Callable[..., None]
BeforeStep = Callable[[int, bool], None]  # (head-stage step, resumed): e.g. a test's injected fault
Progress = Callable[[str, int, int, dict], None]

def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' asked for but CUDA is not available")
    return torch.device(name)


def autocast_for(cfg: Config, device: torch.device):
    if cfg.precision == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def lr_lambda(warmup: int, total: int) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return f


def make_optimizer(params, lr: float, weight_decay: float, warmup: int, total: int):
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(warmup, total))
    return opt, sched


class NonFiniteLoss(FloatingPointError):
    pass


def _check_finite(loss: torch.Tensor, stage: str, step: int) -> None:
    if not torch.isfinite(loss):
        raise NonFiniteLoss(f"{stage} loss is {loss.item()} at step {step}; stopping (lower lr or check data)")


class Trainer:
    """The state of one run, and the two stages that advance it."""

    def __init__(self, cfg: Config, report: Report | None = None, progress: Progress | None = None,
                 corpus: Corpus | None = None, before_step: BeforeStep | None = None):
        self.cfg = cfg
        if cfg.parallel_stage == "drafter":
            describe_curve(cfg.sched_curve)  # reads a table curve's file: a bad one is refused before any training
        self.report = report
        self.progress = progress
        self.before_step = before_step
        self.device = resolve_device(cfg.device)
        self.autocast = autocast_for(cfg, self.device)
        self.out_dir = Path(cfg.out_dir)
        self.corpus = corpus or build_corpus(cfg.data, cfg.text_column, min_len=cfg.seq_len + 1,
                                             max_bytes=cfg.max_corpus_bytes)
        self.data_sha256 = self.corpus.sha256
        self.target_hash = target_hash(cfg, self.data_sha256)
        # a drafter-stage target depends on target_seed alone (so replicates can share it),
        # the draft head on seed; in the backbone stage the LM is trained with the head, on seed
        torch.manual_seed(cfg.target_seed if cfg.parallel_stage == "drafter" else cfg.seed)
        self.target = (HFTarget.from_config(cfg) if cfg.target_model else TargetLM.from_config(cfg)).to(self.device)
        self.target_data_gen = torch.Generator().manual_seed(cfg.target_seed)
        torch.manual_seed(cfg.seed)
        self.data_gen = torch.Generator().manual_seed(cfg.seed)
        self.anchor_gen = torch.Generator().manual_seed(cfg.seed + 1)
        self.val_batches = self.held_out(cfg.eval_batches)
        self.stage = "target" if cfg.parallel_stage == "drafter" else "joint"
        self.stage_step = 0
        self.resumed = False
        self._checkpointed_at = time.perf_counter()  # a run's start counts as its last checkpoint
        self.history: list[dict] = []
        self.items: dict[str, dict] = {}  # the final evaluation's items: {response: {"items", "without"}}
        self.target_loaded = False
        self.head = DraftHead(cfg.head, cfg.confidence_input, VOCAB_SIZE, cfg.d_model, cfg.markov_rank).to(self.device)
        self.drafter = None
        if cfg.parallel_stage == "drafter":
            self.drafter = Drafter(cfg.d_model, cfg.n_heads, cfg.drafter_layers, cfg.context_layers,
                                   cfg.block_size).to(self.device)
        self.models = Models(self.target, self.head, self.drafter, cfg.block_size)
        self.features: FeatureCache | None = None  # opened in the draft stage, on the frozen target
        self.opt = self.sched = None
        self._build_optimizer()

    # ---- optimizer per stage ----
    def _build_optimizer(self) -> None:
        cfg = self.cfg
        if self.stage == "target":
            params = list(self.target.parameters())
            self.opt, self.sched = make_optimizer(params, cfg.target_lr, cfg.weight_decay,
                                                  cfg.warmup_steps, cfg.target_steps)
        elif self.stage == "draft":
            for p in self.target.parameters():
                p.requires_grad_(False)
            self.target.eval()
            self.opt, self.sched = make_optimizer(trainable_parameters(self.models), cfg.lr,
                                                  cfg.weight_decay, cfg.warmup_steps, cfg.draft_steps)
        elif self.stage == "joint":
            self.opt, self.sched = make_optimizer(trainable_parameters(self.models), cfg.target_lr,
                                                  cfg.weight_decay, cfg.warmup_steps, cfg.target_steps)

    # ---- checkpoints ----
    def _rng_state(self) -> dict:
        state = {"torch": torch.get_rng_state(), "data": self.data_gen.get_state(),
                 "anchor": self.anchor_gen.get_state(), "target_data": self.target_data_gen.get_state()}
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def save_checkpoint(self) -> str:
        """The whole state of this run, written as out_dir/checkpoint (`dspark.checkpoint`)."""
        state = {
            "stage": self.stage, "step": self.stage_step,
            "config": json.dumps(self.cfg.to_dict()),
            "data_sha256": self.data_sha256, "target_hash": self.target_hash,
            "head": self.head.state_dict(),
            "drafter": self.drafter.state_dict() if self.drafter is not None else {},
            # a target loaded from a shared path is frozen and addressed by its hash
            "target": {} if (self.target_loaded and self.stage in ("draft", "done")) else self.target.state_dict(),
            "opt": self.opt.state_dict(), "sched": self.sched.state_dict(),
            "rng": self._rng_state(),
            "history": json.dumps(self.history),
            "items": json.dumps(self.items),
        }
        ckpt = write_checkpoint(self.out_dir, state, self.cfg.to_dict())
        self._checkpointed_at = time.perf_counter()
        return str(ckpt)

    def load_checkpoint(self, ckpt_dir: str | os.PathLike) -> None:
        state = read_checkpoint(ckpt_dir, self.cfg, self.device)
        if state["data_sha256"] != self.data_sha256:
            raise ValueError(f"resume: checkpoint corpus {state['data_sha256'][:12]} differs from "
                             f"this run's {self.data_sha256[:12]}")
        self.stage = state["stage"]
        if state["target"]:
            self.target.load_state_dict(state["target"])
        elif self.stage in ("draft", "done"):
            self._load_shared_target()
        self.head.load_state_dict(state["head"])
        if self.drafter is not None:
            self.drafter.load_state_dict(state["drafter"])
        if self.stage != "done":  # a finished run has no optimizer left to resume
            self._build_optimizer()
            self.opt.load_state_dict(state["opt"])
            self.sched.load_state_dict(state["sched"])
        self.stage_step = state["step"]
        rng = state["rng"]
        torch.set_rng_state(rng["torch"].cpu())
        self.data_gen.set_state(rng["data"].cpu())
        self.anchor_gen.set_state(rng["anchor"].cpu())
        self.target_data_gen.set_state(rng["target_data"].cpu())
        if "cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"].cpu(), self.device)
        self.history = json.loads(state["history"])
        self.items = json.loads(state.get("items") or "{}")  # none in a checkpoint written before items
        self.resumed = True

    def _load_shared_target(self) -> None:
        target, _ = load_target(self.cfg.target_path, self.device)
        if target.arch() != self.target.arch():
            raise ValueError(f"target_path: {self.cfg.target_path} holds a target of shape {target.arch()}, "
                             f"the config asks for {self.target.arch()}")
        self.target.load_state_dict(target.state_dict())
        self.target_loaded = True

    # ---- reporting ----
    def _emit(self, metrics: dict, checkpoint: bool, stage_end: bool = False) -> None:
        """Record and report an evaluation. A checkpoint asked for is written at a stage's
        end, and otherwise once `checkpoint_every_s` has passed since the last one: a sweep
        of short trials need not persist (and Tune snapshot) a checkpoint per evaluation."""
        metrics = {k: float(v) for k, v in metrics.items()}
        self.history.append(metrics)
        due = stage_end or time.perf_counter() - self._checkpointed_at >= self.cfg.checkpoint_every_s
        ckpt = self.save_checkpoint() if checkpoint and due else None
        self._report(metrics, ckpt)

    def _report(self, metrics: dict, ckpt: str | None) -> None:
        """To the engine, with the items gathered so far: only a final evaluation gathers any
        (the head stage's last step, then the decoding), so an earlier report has none."""
        if self.report is None:
            return
        if self.items:
            self.report(metrics, ckpt, items=dict(self.items))
        else:
            self.report(metrics, ckpt)

    def _tick(self, total: int, info: dict) -> None:
        if self.progress is not None:
            self.progress(self.stage, self.stage_step, total, info)

    def global_step(self) -> int:
        if self.cfg.parallel_stage == "drafter" and self.stage != "target":
            return (0 if self.target_loaded else self.cfg.target_steps) + self.stage_step
        return self.stage_step

    # ---- stages ----
    def start_draft(self) -> None:
        """From the target stage to the draft stage: the target frozen, a new optimizer."""
        self.stage, self.stage_step = "draft", 0
        self._build_optimizer()

    def run(self) -> dict:
        """Both stages from wherever this trainer stands (a resume point): the target stage
        (trained, or loaded from target_path), then the head stage and the final evaluation."""
        if self.resumed and self.stage != "done" and self.history and self.report is not None:
            # resumed mid-stage: the checkpoint's own evaluation again (no new checkpoint). A
            # driver killed between the trial's report and its store write lost that point,
            # and the trial goes on from the step after it; a tracker logs each step once.
            self._report(dict(self.history[-1]), None)
        if self.stage == "target":
            if self.cfg.target_path:
                self._load_shared_target()
            else:
                self.train_target()
            self.start_draft()
        if self.stage in ("draft", "joint"):
            self.train_head()
            final = self.final_metrics()
            if self.stage == "draft" and self.cfg.spec_prompts:
                final.update(self.speculative(self.cfg.spec_prompts, full=True))
            self.stage = "done"
            training_curves(self.history, self.out_dir / "artifacts")  # carried in the final checkpoint
            self._emit(final, checkpoint=True, stage_end=True)
        elif self.stage == "done" and self.report is not None:
            # resumed from the final checkpoint: report its final metrics again (no new
            # checkpoint), so a run that lost its records still ends with them
            self._report(dict(self.history[-1]), None)
        return self.final_metrics()

    def train_target(self) -> None:
        """The target stage: next-byte CE on the corpus until target_steps, one `step` each. A
        user's own HF model (a directory) is used as given: nothing to train."""
        if is_given(self.cfg.target_model):
            return
        cfg = self.cfg
        tokens, t0 = 0, time.perf_counter()
        while self.stage_step < cfg.target_steps:
            x = sample_batch(self.corpus.train, cfg.batch_size, cfg.seq_len + 1, self.target_data_gen).to(self.device)
            stats = self.step(x)
            self.stage_step += 1
            tokens += x[:, :-1].numel()
            self._tick(cfg.target_steps, {"loss": stats["loss"]})
            if self.stage_step % cfg.eval_interval == 0 or self.stage_step == cfg.target_steps:
                self.target.eval()  # the next step puts it back in training mode
                m = {"target/loss": stats["loss"],
                     "val/bpb": lm_bpb(self.target, self.val_batches, self.device, self.autocast),
                     "target/tokens_per_s": tokens / (time.perf_counter() - t0), "step": self.stage_step}
                self._emit(m, checkpoint=True, stage_end=self.stage_step == cfg.target_steps)
        self.target.eval()

    def anchors(self, batch: int) -> torch.Tensor:
        """The block anchors of one batch: (B, A)."""
        cfg = self.cfg
        if cfg.anchors == "strided":
            return strided_anchors(cfg.seq_len, cfg.stride).expand(batch, -1)
        return random_anchors(batch, cfg.anchors_per_seq, cfg.seq_len, cfg.block_size, self.anchor_gen)

    def _optimizer_step(self, loss: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
        _check_finite(loss, self.stage, self.stage_step)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip)
        self.opt.step()
        self.sched.step()

    def train_head(self) -> None:
        """The head stage (the draft stage on a frozen target, or the backbone's joint stage)."""
        cfg = self.cfg
        total = cfg.draft_steps if self.stage == "draft" else cfg.target_steps
        if self.stage_step == 0 and not self.resumed:
            self._emit({**self.evaluate(), "step": self.global_step()}, checkpoint=False)
        tokens, t0, step_s, steps = 0, time.perf_counter(), 0.0, 0
        while self.stage_step < total:
            if self.before_step is not None:
                self.before_step(self.stage_step, self.resumed)
            starts = sample_starts(len(self.corpus.train), cfg.batch_size, cfg.seq_len + 1, self.data_gen)
            x = windows(self.corpus.train, starts, cfg.seq_len + 1).to(self.device)
            anchors = self.anchors(x.shape[0]).to(self.device)
            ts = time.perf_counter()
            parts = self.step(x, anchors, lm=self.cached_features(starts, x))
            step_s += time.perf_counter() - ts
            steps += 1
            self.stage_step += 1
            tokens += x[:, :-1].numel()
            self._tick(total, {"loss": parts["loss"], **({"tau_tf": parts["tau_tf"]} if "tau_tf" in parts else {})})
            if self.stage_step % cfg.eval_interval == 0 or self.stage_step == total:
                # forward + backward + optimizer step alone, mean over this stage so far
                m = {"train/tokens_per_s": tokens / (time.perf_counter() - t0),
                     "train/step_ms_sweep": 1000.0 * step_s / steps}
                m.update({f"train/{k}": v for k, v in parts.items()})
                m.update(self.evaluate(final=self.stage_step == total))  # the final one with its jackknife
                if self.stage == "draft" and cfg.spec_interval_prompts and self.stage_step < total:
                    m.update(self.speculative(cfg.spec_interval_prompts, full=False))
                m["step"] = self.global_step()
                self._emit(m, checkpoint=True, stage_end=self.stage_step == total)
        self._train_mode(False)

    def cached_features(self, starts: torch.Tensor, x: torch.Tensor) -> TargetOutput | None:
        """The frozen target's features of the draft stage's batch x (B, T + 1) at `starts`,
        from the feature cache (computed and kept there on a miss); None without one."""
        cfg = self.cfg
        if self.stage != "draft" or not cfg.feature_cache:
            return None
        if self.features is None:
            layer_ids = tuple(sorted({i % cfg.n_layers for i in cfg.context_layers}))  # -1: the last
            key = FeatureKey(json.dumps(cfg.target_dict(), sort_keys=True), weights_hash(self.target), cfg.n_layers,
                             layer_ids, self.data_sha256, cfg.seq_len + 1, cfg.batch_size)
            self.features = FeatureCache(cfg.feature_cache, key)
        got = self.features.get(starts, x, self.target.lm_head)
        if got is None:
            with torch.no_grad(), self.autocast():
                got = self.target(x[:, :-1])
            self.features.put(starts, x, got)
        return got

    def step(self, x: torch.Tensor, anchors: torch.Tensor | None = None,
             lm: TargetOutput | None = None) -> dict[str, float]:
        """One training step of the stage the trainer is in, on a batch x (B, T + 1): the
        loss, its backward pass, gradient clipping, the optimizer's and the schedule's step,
        the device synchronised after it. The target stage trains the LM on next-byte CE;
        a head stage (draft, or the backbone's joint stage) needs the batch's block anchors
        (B, A); the draft stage may be handed the frozen target's features of x (`lm`, from
        the feature cache) in place of its forward. Returns the step's statistics as floats:
        `loss` and, in a head stage, its logged parts. Advances neither the stage's step count nor any data stream: the
        caller owns both (the stage loops, the benches, the timing pass)."""
        if self.stage == "target":
            self.target.train()
            loss, parts = self._target_loss(x), {}
            params = list(self.target.parameters())
        elif self.stage in ("draft", "joint"):
            if anchors is None:
                raise ValueError(f"step: the {self.stage} stage needs the batch's block anchors (B, A)")
            self._train_mode(True)
            loss, parts = self.head_loss(x, anchors, lm)
            params = trainable_parameters(self.models)
        else:
            raise ValueError(f"step: the trainer is in stage {self.stage!r}; a step needs the target, draft "
                             "or joint stage")
        self._optimizer_step(loss, params)
        sync(self.device)
        return {"loss": loss.item(), **{k: v.item() for k, v in parts.items()}}

    def _target_loss(self, x: torch.Tensor) -> torch.Tensor:
        """The target stage's loss on x (B, T + 1): the LM's next-byte CE."""
        with self.autocast():
            logits = self.target(x[:, :-1]).logits  # (B, T, V)
        return F.cross_entropy(logits.float().reshape(-1, VOCAB_SIZE), x[:, 1:].reshape(-1))

    def head_loss(self, x: torch.Tensor, anchors: torch.Tensor,
                  lm: TargetOutput | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One batch's loss and its logged parts. Draft stage: the DSpark loss on the frozen
        target. Backbone stage: CE_lm + aux_weight * L_dspark, where the pure-CE control
        (aux_weight 0) runs no head at all, so its step time is what the LM costs alone."""
        cfg = self.cfg
        pure_ce = self.stage == "joint" and cfg.aux_weight == 0
        with self.autocast():
            if self.stage == "draft":
                if lm is None:
                    with torch.no_grad():
                        lm = self.target(x[:, :-1])
                out = draft_blocks(self.models, x, anchors, cfg.window, lm=lm)
            elif pure_ce:
                lm = self.target(x[:, :-1])
            else:
                out = draft_blocks(self.models, x, anchors, cfg.window)
                lm = out.lm
        parts: dict[str, torch.Tensor] = {}
        if not pure_ce:
            res = dspark_loss(draft_logits=out.draft_logits, target_logits=out.target_logits, labels=out.labels,
                              valid=out.valid, confidence_logits=out.conf_logits, decay_gamma=cfg.decay_denominator,
                              alphas=(cfg.alpha_ce, cfg.alpha_tv, cfg.alpha_conf))
            parts = {k: res[k] for k in ("ce", "tv", "conf", "tau_tf")}
        if self.stage != "joint":
            return res["loss"], parts
        lm_ce = F.cross_entropy(lm.logits.float().reshape(-1, VOCAB_SIZE), x[:, 1:].reshape(-1))
        parts["lm_ce"] = lm_ce
        return (lm_ce if pure_ce else lm_ce + cfg.aux_weight * res["loss"]), parts

    def _train_mode(self, on: bool) -> None:
        self.head.train(on)
        if self.drafter is not None:
            self.drafter.train(on)
        if self.stage == "joint":
            self.target.train(on)

    def held_out(self, n_batches: int) -> list[torch.Tensor]:
        """n held-out batches, the config's eval_batches first (`data.held_out_batches`)."""
        cfg = self.cfg
        return held_out_batches(self.corpus.val, n_batches, cfg.batch_size, cfg.seq_len + 1, first=cfg.eval_batches)

    def evaluate(self, final: bool = False, batches: list[torch.Tensor] | None = None) -> dict:
        """The teacher-forced evaluation on `batches` (the run's val_batches); a final one
        also gathers its items (its jackknife over the batches) in `self.items`."""
        was = self.head.training
        self._train_mode(False)
        m, items = teacher_forced(self.models, self.val_batches if batches is None else batches, self.cfg.stride,
                                  self.device, self.autocast, jackknife_groups=final)
        self._train_mode(was)
        self.items.update(items)
        return m

    def speculative(self, n_prompts: int, full: bool) -> dict:
        # the final evaluation takes minutes: its phases show as progress of their own
        phases = None
        if full and self.progress is not None:
            phases = lambda phase, done, total: self.progress(phase, done, total, {})  # noqa: E731
        m, items = evaluate_speculative(self.models, self.corpus, self.cfg, self.device,
                                        self.out_dir if full else None, n_prompts=n_prompts, full=full,
                                        progress=phases)
        self.items.update(items)  # a full evaluation's: the run's final one
        return m

    def final_metrics(self) -> dict:
        """The last evaluation's metrics (the responses of the run)."""
        last = next((h for h in reversed(self.history) if "tf/tau" in h), None)
        if last is None:
            last = {**self.evaluate(final=True), "step": self.global_step()}
        return dict(last)


def train(config: Config | dict[str, Any], report: Report | None = None, resume_from: str | None = None,
          progress: Progress | None = None, before_step: BeforeStep | None = None) -> dict:
    """Run both stages; call report(metrics, checkpoint_dir) every eval interval (the final
    evaluation's with `items=`, its jackknife); return the final metrics."""
    cfg = config if isinstance(config, Config) else from_dict(config)
    trainer = Trainer(cfg, report=report, progress=progress, before_step=before_step)
    if resume_from:
        trainer.load_checkpoint(resume_from)
    return trainer.run()


def train_shared_target(config: Config | dict[str, Any], path: str | os.PathLike,
                        progress_file: str | os.PathLike | None = None) -> dict:
    """Train only the target stage of `config` and save it to `path` (atomically), for a
    sweep whose trials share it. Returns its metadata (hashes and final val/bpb). Each
    evaluation's step and val/bpb go to `progress_file` (JSON, replaced whole), where the
    sweep's driver reads them while it waits."""
    import tempfile

    def report(m: dict, _ckpt) -> None:
        if progress_file is not None and "val/bpb" in m:
            write_atomic(Path(progress_file),
                         json.dumps({"step": int(m["step"]), "of": cfg.target_steps, "val/bpb": m["val/bpb"]}))

    cfg = config if isinstance(config, Config) else from_dict(config)
    with tempfile.TemporaryDirectory(prefix="dspark-target-") as tmp:
        trainer = Trainer(cfg.replace(target_path="", parallel_stage="drafter", out_dir=tmp), report=report)
        trainer.train_target()
        bpb = next((h["val/bpb"] for h in reversed(trainer.history) if "val/bpb" in h), float("nan"))
    meta = {"target_hash": trainer.target_hash, "data_sha256": trainer.data_sha256, "val/bpb": bpb,
            "target_config": cfg.target_dict()}
    save_target(path, trainer.target, meta)
    return meta
