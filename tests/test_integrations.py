"""Trainer integrations, run for real: a transformers.Trainer and a pytorch_lightning.Trainer, a few steps each.

The recorded run is compared with what the trainer itself saw (its logged losses; the gradients
torch holds when the optimizer steps) and opened as a user would: ``gradviz runs show`` and the
app's run reader.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gradviz.core.record import open_run

ROOT = Path(__file__).resolve().parent.parent


def runs_show(path: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "gradviz", "runs", "show", str(path), "--json"], capture_output=True,
                          text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


class TokenData(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, 100, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def test_huggingface_trainer_with_gradient_accumulation(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from gradviz.integrations.huggingface import GradvizCallback

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=32))
    seen: list[np.ndarray] = []

    class Oracle(torch.optim.AdamW):         # the gradients torch holds when the optimizer steps
        def step(self, closure=None):
            seen.append(np.array([p.grad.norm().item() for p in model.parameters()]))
            return super().step(closure)

    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, max_steps=5,
                             gradient_accumulation_steps=2, logging_steps=1, report_to=[], save_strategy="no",
                             use_cpu=True, disable_tqdm=True, max_grad_norm=0.0)
    optimizer = Oracle(model.parameters(), lr=1e-3)
    trainer = Trainer(model=model, args=args, train_dataset=TokenData(), optimizers=(optimizer, None),
                      callbacks=[GradvizCallback(tmp_path / "hf.gvrun", every=2)])
    trainer.train()

    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    with open_run(tmp_path / "hf.gvrun") as run:
        cols = run.steps()
        # numbered as the Trainer numbers its steps (from 1: its log_history), not from 0 (issue #28)
        assert list(cols["step"]) == [h["step"] for h in trainer.state.log_history if "loss" in h] == [1, 2, 3, 4, 5]
        np.testing.assert_allclose(cols["loss"], logged, rtol=1e-4)           # the Trainer's own step losses
        np.testing.assert_allclose(cols["grad_norms"], np.stack(seen), rtol=1e-4)
        assert np.isfinite(cols["update_ratio"]).any()                        # the optimizer was seen
        assert run.node_steps() == [1, 2, 4] and run.graph() is not None      # the first, then every 2 steps
    info = runs_show(tmp_path / "hf.gvrun")
    assert info["ranks"][0]["steps"] == 5 and info["ranks"][0]["model_class"].endswith("GPT2LMHeadModel")


def test_lightning_trainer(tmp_path):
    import pytorch_lightning as pl

    from gradviz.integrations.lightning import GradvizCallback

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
            self.losses: list[float] = []
            self.norms: list[np.ndarray] = []

        def training_step(self, batch, index):
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.losses.append(loss.item())
            return loss

        def on_before_optimizer_step(self, optimizer):     # runs after the callbacks' hook: same gradients
            self.norms.append(np.array([p.grad.norm().item() for p in self.parameters()]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g))
    module = Classifier()
    trainer = pl.Trainer(max_steps=4, accumulate_grad_batches=2, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         gradient_clip_val=0.01, callbacks=[GradvizCallback(tmp_path / "pl.gvrun", every=1)])
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))

    with open_run(tmp_path / "pl.gvrun") as run:
        cols = run.steps()
        step_losses = np.array(module.losses).reshape(-1, 2).mean(axis=1)      # two micro-batches per step
        np.testing.assert_allclose(cols["loss"], step_losses, rtol=1e-5)
        np.testing.assert_allclose(cols["grad_norms"], np.stack(module.norms), rtol=1e-5)   # before clipping
        assert (cols["grad_norm"] > 0.01).all()
        assert len(run.node_steps()) == 4
        assert np.isfinite(cols["update_ratio"]).all() and (cols["update_ratio"] > 0).all()   # the optimizer seen
    assert runs_show(tmp_path / "pl.gvrun")["ranks"][0]["steps"] == 4


def test_the_recorded_run_opens_in_the_app(qtbot, window, tmp_path):
    import pytorch_lightning as pl

    from gradviz.integrations.lightning import GradvizCallback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch, index):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(16, 4, generator=torch.Generator().manual_seed(0)))
    pl.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, callbacks=[GradvizCallback(tmp_path / "tiny.gvrun", every=1)]
               ).fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
    from gradviz.app.runs import install, open_run_file

    panel = install(window)
    with qtbot.waitSignal(window.graphShown, timeout=60_000):
        assert open_run_file(window, panel, tmp_path / "tiny.gvrun")
    assert window.document.kind == "run" and "param:net.weight" in window.document.graph


def test_import_gradviz_imports_no_trainer_package():
    code = ("import sys, gradviz, gradviz.integrations; gradviz.trace; gradviz.watch; gradviz.show; "
            "bad = [m for m in ('transformers', 'pytorch_lightning', 'lightning') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


DDP_SCRIPT = '''
import torch, torch.nn as nn, pytorch_lightning as pl
from gradviz.integrations.lightning import GradvizCallback


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def training_step(self, batch, index):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g))
    trainer = pl.Trainer(max_steps=3, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[GradvizCallback("ddp.gvrun", every=1)])
    trainer.fit(Classifier(), torch.utils.data.DataLoader(data, batch_size=8))
'''


def test_lightning_ddp_writes_one_file_per_rank(tmp_path):
    (tmp_path / "train_ddp.py").write_text(DDP_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADVIZ_NATIVE": "0"}
    proc = subprocess.run([sys.executable, "train_ddp.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open_run(tmp_path / "ddp.rank0.gvrun") as r0, open_run(tmp_path / "ddp.rank1.gvrun") as r1:
        a, b = r0.steps(), r1.steps()
        assert list(a["step"]) == list(b["step"]) == [0, 1, 2]
        np.testing.assert_allclose(a["grad_norms"], b["grad_norms"], rtol=1e-5)   # after DDP's all-reduce
        assert not np.allclose(a["loss"], b["loss"])                               # each rank its own batches
    info = runs_show(tmp_path / "ddp.gvrun")
    assert [r["rank"] for r in info["ranks"]] == [0, 1] and all(r["world_size"] == 2 for r in info["ranks"])


HF_DDP_SCRIPT = '''
import json
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from gradviz.integrations.huggingface import GradvizCallback


class TokenData(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        ids = torch.randint(0, 100, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


if __name__ == "__main__":
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=100, n_positions=16))
    args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, max_steps=3, logging_steps=1,
                             report_to=[], save_strategy="no", use_cpu=True, ddp_backend="gloo", disable_tqdm=True,
                             max_grad_norm=0.0)
    trainer = Trainer(model=model, args=args, train_dataset=TokenData(),
                      callbacks=[GradvizCallback("hf.gvrun", every=1)])
    trainer.train()
    if trainer.is_world_process_zero():
        with open("logged.json", "w") as f:
            json.dump([h for h in trainer.state.log_history if "loss" in h], f)
'''


def test_huggingface_trainer_under_ddp_writes_one_file_per_rank(tmp_path):
    """torchrun, 2 CPU processes (gloo): each rank its own file; the norms are the all-reduced ones the Trainer
    logs, the losses each rank's own (their mean is the loss the Trainer logs)."""
    (tmp_path / "train_hf.py").write_text(HF_DDP_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADVIZ_NATIVE": "0", "OMP_NUM_THREADS": "1"}
    with socket.socket() as free:       # a port nobody listens on (torchrun's port 0 is not "any port")
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_addr", "127.0.0.1", "--master_port", str(port), "train_hf.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logged = json.loads((tmp_path / "logged.json").read_text())
    with open_run(tmp_path / "hf.rank0.gvrun") as r0, open_run(tmp_path / "hf.rank1.gvrun") as r1:
        a, b = r0.steps(), r1.steps()
        assert list(a["step"]) == list(b["step"]) == [h["step"] for h in logged] == [1, 2, 3]   # the Trainer's
        np.testing.assert_allclose(a["grad_norms"], b["grad_norms"], rtol=1e-5)       # after DDP's all-reduce
        np.testing.assert_allclose(a["grad_norm"], [h["grad_norm"] for h in logged], rtol=1e-4)
        assert not np.allclose(a["loss"], b["loss"])                                   # each rank its own batches
        np.testing.assert_allclose((a["loss"] + b["loss"]) / 2, [h["loss"] for h in logged], rtol=1e-3)
        assert np.isfinite(a["update_ratio"]).all() and r0.node_steps() == r1.node_steps() == [1, 2, 3]
    info = runs_show(tmp_path / "hf.gvrun")
    assert [r["rank"] for r in info["ranks"]] == [0, 1] and all(r["world_size"] == 2 for r in info["ranks"])
