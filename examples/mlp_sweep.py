"""Your trainer as a workload: a tiny MLP on made-up data, two switches (weight decay, LayerNorm)."""
from dataclasses import dataclass

import torch


@dataclass
class Config:
    weight_decay: float = 0.0
    layer_norm: bool = False
    steps: int = 150
    seed: int = 0


def train(cfg: Config, report) -> None:
    torch.manual_seed(cfg.seed)
    x = torch.randn(512, 8)
    y = torch.sin(x @ torch.linspace(-1, 1, 8)).unsqueeze(1)
    norm = torch.nn.LayerNorm(32) if cfg.layer_norm else torch.nn.Identity()
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), norm, torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=cfg.weight_decay)
    for step in range(1, cfg.steps + 1):
        loss = torch.nn.functional.mse_loss(model(x[:384]), y[:384])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            with torch.no_grad():
                err = (model(x[384:]) - y[384:]).square().squeeze(1)  # each held-out example's error
            report({"step": step, "val/mse": err.mean().item()}, items={"val/mse": err.tolist()})


class MLP:
    name = "mlp"
    config = Config
    train = staticmethod(train)
    metrics = {"val/mse": {"better": "lower", "margin": 0.005}}


WORKLOAD = MLP()
