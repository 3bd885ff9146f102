"""The HF Trainer callback under DDP (2 gloo processes) records the averaged gradients' norms before the clip.

Each rank trains a tiny GPT-2 with a real ``transformers.Trainer`` on its own shard of the data, two
micro-batches per step, with ``max_grad_norm`` far under the gradients' norms (every step clipped). Torch is the oracle: at each
optimizer step a reference copy of the model (same weights) runs the micro-batches this rank saw with
the same arguments (``num_items_in_batch`` included: the loss scale the Trainer gave), its local gradients are all-reduced and averaged by hand, and their norms must
be the run file's per-parameter norms, on both ranks. The local (not yet reduced) norms and the
clipped ones the optimizer steps with must both differ from what is recorded.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist

import dist_harness

pytestmark = pytest.mark.skipif(not dist_harness.available(), reason="torch.distributed with gloo is needed")

MAX_NORM = 0.05
STEPS = 2
ACCUMULATION = 2         # the first micro-batch's backward does not all-reduce (no_sync): only the last is read


class Tokens(torch.utils.data.Dataset):
    """Different ids at every index: the ranks' shards of the data differ, so do their local gradients."""

    def __init__(self, n: int = 16) -> None:
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 100, (n, 16), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=16,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def _rank(rank: int, world: int, tmp, _unused=None) -> None:
    # what torchrun sets: the Trainer (accelerate) then runs DDP over the process group the harness opened
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    from transformers import Trainer, TrainingArguments

    from gradviz.integrations.huggingface import GradvizCallback

    model, ref = _gpt2(), _gpt2()
    names = [n for n, _ in model.named_parameters()]
    seen: list[dict] = []                                    # the step's micro-batches, as the model got them
    model.register_forward_pre_hook(lambda m, a, kw: seen.append(dict(kw)), with_kwargs=True)
    oracle: dict = {"averaged": [], "local": [], "clipped": []}

    class Oracle(torch.optim.SGD):
        def step(self, closure=None):
            ref.load_state_dict(model.state_dict())          # the weights this step's forward ran with
            ref.zero_grad(set_to_none=True)
            for kwargs in seen:                              # this rank's own gradients, plain autograd
                ref(**kwargs).loss.backward()
            seen.clear()
            local = [p.grad.clone() for p in ref.parameters()]
            for g in local:
                dist.all_reduce(g)                           # summed over the ranks ...
            oracle["averaged"].append([(g / world).norm().item() for g in local])     # ... and averaged
            oracle["local"].append([p.grad.norm().item() for p in ref.parameters()])
            oracle["clipped"].append([p.grad.norm().item() for p in model.parameters()])
            return super().step(closure)

    args = TrainingArguments(output_dir=str(tmp / f"out{rank}"), per_device_train_batch_size=2, max_steps=STEPS,
                             gradient_accumulation_steps=ACCUMULATION,
                             logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
                             max_grad_norm=MAX_NORM, lr_scheduler_type="constant", dataloader_num_workers=0,
                             average_tokens_across_devices=False)   # each rank's loss is its own tokens' mean
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(),
                      optimizers=(Oracle(model.parameters(), lr=0.5), None),
                      callbacks=[GradvizCallback(tmp / "hf.gvrun", every=0)])
    trainer.train()
    assert trainer.args.world_size == world            # really distributed
    (tmp / f"oracle{rank}.json").write_text(json.dumps({"names": names, **oracle}))


def test_hf_callback_under_ddp_records_the_averaged_norms_before_the_clip(tmp_path):
    from gradviz.core.record import open_run

    dist_harness.run_ranks(_rank, tmp_path, None, world=2, timeout=180)
    runs = []
    for rank in range(2):
        oracle = json.loads((tmp_path / f"oracle{rank}.json").read_text())
        averaged, local, clipped = (np.array(oracle[k]) for k in ("averaged", "local", "clipped"))
        assert averaged.shape == (STEPS, len(oracle["names"]))
        with open_run(tmp_path / f"hf.rank{rank}.gvrun") as run:
            cols = run.steps()
            assert run.meta["param_names"] == oracle["names"]
            assert run.meta["grad_norms"] == "before_clip" and run.meta["max_grad_norm"] == MAX_NORM
            recorded = cols["grad_norms"]
        np.testing.assert_allclose(recorded, averaged, rtol=1e-4, atol=1e-7)
        assert (np.sqrt((averaged ** 2).sum(axis=1)) > 10 * MAX_NORM).all()       # clipping mattered
        assert not np.allclose(recorded, local, rtol=1e-3)       # not this rank's gradients before the all-reduce
        assert not np.allclose(recorded, clipped, rtol=1e-3)     # not the clipped ones
        runs.append(recorded)
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-5)      # the averaged gradients are every rank's
