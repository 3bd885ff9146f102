"""The HF Trainer callback records raw (pre-clip) gradient norms, as the Lightning callback does (issue #28).

transformers' Trainer clips (``accelerator.clip_grad_norm_``) before ``on_pre_optimizer_step``; the
callback measures each gradient in the last micro-batch's backward instead. Torch is the oracle: the
Trainer's logged ``grad_norm`` is ``clip_grad_norm_``'s pre-clip total, and the gradients the optimizer
steps with are the raw ones times torch's clip coefficient ``min(1, max_norm / (total + 1e-6))``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gradviz.core.record import open_run

MAX_NORM = 0.05          # well under the tiny GPT-2's gradient norms (~2-6): every step is clipped


class SameBatch(torch.utils.data.Dataset):
    """Every item the same: the Trainer's shuffled sampler and Lightning's loader give the same batches."""

    def __init__(self, n: int = 16) -> None:
        self.n = n
        self.ids = torch.randint(0, 100, (16,), generator=torch.Generator().manual_seed(0))
        # the first label is never predicted (GPT-2 shifts them): -100 makes the Trainer's
        # num_items_in_batch (labels != -100) the tokens the loss averages, as Lightning's plain mean
        self.labels = self.ids.clone()
        self.labels[0] = -100

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids, "labels": self.labels}


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=100, n_positions=16,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def hf_train(tmp_path, model, accumulation: int, steps: int = 3, seen: list | None = None):
    from transformers import Trainer, TrainingArguments

    from gradviz.integrations.huggingface import GradvizCallback

    class Oracle(torch.optim.SGD):         # the gradients torch holds when the optimizer steps (clipped)
        def step(self, closure=None):
            if seen is not None:
                seen.append(np.array([p.grad.norm().item() for p in model.parameters()]))
            return super().step(closure)

    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, max_steps=steps,
                             gradient_accumulation_steps=accumulation, logging_steps=1, report_to=[],
                             save_strategy="no", use_cpu=True, disable_tqdm=True, max_grad_norm=MAX_NORM,
                             lr_scheduler_type="constant")
    trainer = Trainer(model=model, args=args, train_dataset=SameBatch(),
                      optimizers=(Oracle(model.parameters(), lr=0.5), None),
                      callbacks=[GradvizCallback(tmp_path / "hf.gvrun", every=0)])
    trainer.train()
    return [h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h]


@pytest.mark.parametrize("accumulation", [1, 2])
def test_hf_callback_records_the_norms_before_the_trainers_clip(tmp_path, accumulation):
    model = tiny_gpt2()
    seen: list[np.ndarray] = []
    logged = np.array(hf_train(tmp_path, model, accumulation, seen=seen))
    assert len(logged) == 3 and (logged > 10 * MAX_NORM).all()          # clipping really happened
    clipped = np.stack(seen)
    np.testing.assert_allclose(np.sqrt((clipped ** 2).sum(axis=1)), MAX_NORM, rtol=1e-4)
    coef = MAX_NORM / (logged + 1e-6)                                    # torch's clip_grad_norm_ coefficient
    with open_run(tmp_path / "hf.gvrun") as run:
        cols = run.steps()
        np.testing.assert_allclose(cols["grad_norm"], logged, rtol=1e-4)    # the Trainer's pre-clip total
        np.testing.assert_allclose(cols["grad_norms"], clipped / coef[:, None], rtol=1e-4, atol=1e-7)
        assert not np.allclose(cols["grad_norms"], clipped)                   # not the clipped ones


def test_hf_and_lightning_record_the_same_norms(tmp_path):
    import pytorch_lightning as pl

    from gradviz.integrations.lightning import GradvizCallback as LightningCallback

    hf_train(tmp_path, tiny_gpt2(), accumulation=1)

    class LM(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.gpt = tiny_gpt2()

        def training_step(self, batch, index):
            return self.gpt(**batch).loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    loader = torch.utils.data.DataLoader(SameBatch(), batch_size=2)
    pl.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, gradient_clip_val=MAX_NORM, gradient_clip_algorithm="norm",
               callbacks=[LightningCallback(tmp_path / "pl.gvrun", every=0)]).fit(LM(), loader)
    with open_run(tmp_path / "hf.gvrun") as hf, open_run(tmp_path / "pl.gvrun") as lt:
        a, b = hf.steps(), lt.steps()
        assert [n.removeprefix("gpt.") for n in lt.meta["param_names"]] == hf.meta["param_names"]
        for meta in (hf.meta, lt.meta):           # both say which norms they hold, and the clip's threshold
            assert (meta["grad_norms"], meta["max_grad_norm"]) == ("before_clip", MAX_NORM)
        assert (a["grad_norm"] > 10 * MAX_NORM).all()
        np.testing.assert_allclose(a["grad_norms"], b["grad_norms"], rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)


@pytest.mark.parametrize("strategy", ["host", "device"])
@pytest.mark.parametrize("updates", [False, True])
def test_step_stats_take_norms_measured_before_a_clip(strategy, updates):
    from torch import nn

    from gradviz.core.stats.steps import StepStats, step_columns

    torch.manual_seed(0)
    net = nn.ModuleDict({"used": nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)),
                         "unused": nn.Linear(3, 3)})                        # no gradient: None in the norms
    net["used"](torch.randn(5, 4)).pow(2).sum().backward()
    raw = [None if p.grad is None else p.grad.norm() for p in net.parameters()]
    total = torch.nn.utils.clip_grad_norm_(net.parameters(), MAX_NORM)     # torch's clip, as the Trainer's
    clipped = [np.nan if p.grad is None else p.grad.norm().item() for p in net.parameters()]
    stats = StepStats(net.named_parameters(), strategy=strategy)
    stats.grads_ready(updates=updates)
    weights_before = step_columns([stats.numbers()])["weight_norms"]
    assert stats.use_grad_norms(raw, MAX_NORM)
    cols = step_columns([stats.numbers()])
    np.testing.assert_allclose(cols["param_norms"][0], [np.nan if t is None else t.item() for t in raw], rtol=1e-6)
    np.testing.assert_allclose(cols["grad_norm"][0], total.item(), rtol=1e-6)
    np.testing.assert_allclose(cols["param_norms_clipped"][0], clipped, rtol=1e-5)
    np.testing.assert_array_equal(cols["weight_norms"], weights_before)
    # norms that miss a gradient present now are refused: the measured (clipped) norms stay
    stats.grads_ready(updates=updates)
    assert not stats.use_grad_norms([None] + raw[1:], MAX_NORM)
    np.testing.assert_allclose(step_columns([stats.numbers()])["param_norms"][0], clipped, rtol=1e-5)
