"""Models by class name: ``gradviz export transformers:GPT2LMHeadModel --config ... --input 2,16:long``.

A class with a configuration class is built from that class's defaults with ``--config`` overrides
(never the hub); an auto class from ``model_type``; a callable needing arguments is refused in one line
saying how to give them (the issue: "missing 1 required positional argument: 'config'", located in
gradviz's generated wrapper). Token ids come from the input embedding (``get_input_embeddings()``): before,
the smallest ``nn.Embedding`` gave GPT-2 the position table ([0, 32)) and BERT the token types ([0, 2)).
Through ``main()`` as the command line runs it; torch is the oracle for the gradient shown.
"""
from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest
import torch

import transformers  # noqa: E402  (a test dependency: never skipped, tests/test_honest_skips.py)

from gradviz.cli.main import main  # noqa: E402
from gradviz.core.runtime.errors import ScriptError  # noqa: E402
from gradviz.core.script.factory import construct, parse_config  # noqa: E402
from gradviz.core.script.generated import model_source  # noqa: E402

GPT2 = "n_layer=1,n_embd=16,n_head=2,vocab_size=97,n_positions=32"
BERT = "num_hidden_layers=1,hidden_size=16,num_attention_heads=2,intermediate_size=32,vocab_size=89"
LLAMA = "num_hidden_layers=1,hidden_size=16,num_attention_heads=2,num_key_value_heads=1,intermediate_size=32,vocab_size=83"
T5 = "num_layers=1,d_model=16,d_kv=8,num_heads=2,d_ff=32,vocab_size=79"


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main([str(a) for a in argv])
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("target, config, vocab, embedding", [
    ("transformers:GPT2LMHeadModel", GPT2, 97, "transformer.wte"),
    ("transformers.models.gpt2:GPT2LMHeadModel", GPT2, 97, "transformer.wte"),
    ("transformers:BertModel", BERT, 89, "embeddings.word_embeddings"),
    ("transformers:LlamaForCausalLM", LLAMA, 83, "model.embed_tokens"),
    ("transformers:T5EncoderModel", T5, 79, "shared"),
])
def test_a_class_is_built_from_its_config_class(tmp_path, target, config, vocab, embedding):
    status, _, err = run_cli("export", target, "--config", config, "--input", "2,12:long", "-o", tmp_path / "g.json")
    assert status == 0, err
    assert f"token ids in [0, {vocab}) (the input embedding {embedding};" in err
    graph = json.loads((tmp_path / "g.json").read_text())
    assert graph["graph"]["model_source"] == target
    params = {n["id"] for n in graph["nodes"] if n.get("kind") == "param"}
    assert f"param:{embedding}.weight" in params


def test_the_gradient_shown_is_torchs(tmp_path, monkeypatch):
    """The same class, config and invented ids through torch give the drawn gradient norm."""
    monkeypatch.chdir(tmp_path)
    import gradviz

    config = BERT + ",hidden_dropout_prob=0,attention_probs_dropout_prob=0"     # one function: no dropout
    path, note = model_source("transformers:BertModel", ["2,12:long"], "ce", config=config)
    assert "config num_hidden_layers=1" in note
    with redirect_stderr(io.StringIO()):
        graph = gradviz.trace(path)
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(**parse_config(config)))
    ids = torch.randint(0, 89, (2, 12), generator=torch.Generator().manual_seed(0))    # the invented ids
    script = gradviz.load_script(path)
    script.new_model()                                     # the id range is known once the model is built
    assert torch.equal(script.get_batch(0)[0][0], ids)     # drawn from the input embedding's 89 rows
    out = model(ids).last_hidden_state
    target = torch.randint(0, out.shape[-1], out.shape[:-1], generator=torch.Generator().manual_seed(0))
    torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1)).backward()
    word = graph.nodes["param:embeddings.word_embeddings.weight"]
    assert word["grad_norm"] == pytest.approx(model.embeddings.word_embeddings.weight.grad.norm().item(), rel=1e-4)


def test_an_auto_class_takes_model_type(tmp_path):
    status, _, err = run_cli("export", "transformers:AutoModelForCausalLM", "--config", "model_type=gpt2," + GPT2,
                             "--input", "2,8:long", "-o", tmp_path / "a.json")
    assert status == 0, err
    assert "token ids in [0, 97) (the input embedding transformer.wte;" in err


@pytest.mark.parametrize("target, says", [
    ("transformers:AutoModel", "picks its model class from a configuration: name the class itself"),
    ("transformers:AutoModel.from_pretrained", "gradviz never downloads"),
])
def test_what_cannot_be_built_says_how_in_one_line(tmp_path, target, says):
    status, out, err = run_cli("export", target, "--input", "2,8:long", "-o", tmp_path / "x.json")
    assert status == 2 and says in err and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("gradviz export:")]
    assert len(lines) == 1 and "gradviz/core/script" not in lines[0] and "models/" not in lines[0]


def test_a_callable_needing_arguments_is_told_how(tmp_path, monkeypatch):
    (tmp_path / "needsargs.py").write_text("import torch\n\ndef build(width, depth=1):\n"
                                           "    return torch.nn.Linear(width, width)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScriptError, match=r"needs argument\(s\) width: give them with --config"):
        construct("needsargs:build")
    assert construct("needsargs:build", {"width": 3}).in_features == 3


@pytest.mark.parametrize("text, bad", [("n_layer", True), ("2=3", True), ("a=1,b=x,c=true,d=0.5,e=none", False)])
def test_config_text_is_data(text, bad):
    if bad:
        with pytest.raises(ValueError, match="KEY=VALUE"):
            parse_config(text)
    else:
        assert parse_config(text) == {"a": 1, "b": "x", "c": True, "d": 0.5, "e": None}


def test_an_encoder_decoder_gets_its_decoder_ids_from_the_first_input(tmp_path, monkeypatch):
    """T5ForConditionalGeneration by name with one --input: the decoder runs on the same ids, said once;
    torch (the same call by hand) gives the drawn gradient of the shared embedding and the decoder's."""
    monkeypatch.chdir(tmp_path)
    import gradviz

    config = "num_layers=1,num_decoder_layers=1,d_model=16,d_kv=8,num_heads=2,d_ff=32,vocab_size=79,dropout_rate=0"
    status, _, err = run_cli("export", "transformers:T5ForConditionalGeneration", "--config", config,
                             "--input", "2,12:long", "-o", tmp_path / "g.json")
    assert status == 0, err
    assert err.count("decoder_input_ids: input 0 again (an encoder-decoder model") == 1
    path, _ = model_source("transformers:T5ForConditionalGeneration", ["2,12:long"], "sum", config=config)
    with redirect_stderr(io.StringIO()):
        graph = gradviz.trace(path)
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**parse_config(config)))
    ids = torch.randint(0, 79, (2, 12), generator=torch.Generator().manual_seed(0))
    model(ids, decoder_input_ids=ids).logits.float().sum().backward()
    for name in ("shared.weight", "decoder.block.0.layer.0.SelfAttention.q.weight"):
        want = model.get_parameter(name).grad.norm().item()
        assert graph.nodes[f"param:{name}"]["grad_norm"] == pytest.approx(want, rel=1e-4)
