"""The optional native accelerator of the recorder (``gradviz_native.cpp``): built once, cached.

On a small model the recorder's Python calls are a visible part of a half-millisecond step:
reading six gradient norms costs ~20 us, and a sampled step's Python autograd hooks, walk and
structure key ~150 us. The C++ module does the same work (same numbers: tests compare it with
the Python paths and with torch) in a few microseconds. It is optional: without it every path
runs in Python, unchanged.

It is opt-in: nothing is compiled unless the user asks. It is compiled against the
installed torch with ``torch.utils.cpp_extension`` (a C++ compiler and ninja are needed;
~20 s), into ``$GRADVIZ_CACHE`` (default ``~/.cache/gradviz``)/``native/<key>``, the key
hashing the source, the torch version and C++ ABI, the Python ABI and the machine -- not the
interpreter's path, so every virtual environment with the same torch and Python shares one
build, and an upgrade of either builds a fresh copy. Loading a built copy costs one
``import``; no compiler runs then.

* ``gradviz native build`` builds it (and says where, and how long it took);
* ``GRADVIZ_NATIVE``: ``auto`` (default) uses a built copy when there is one, and never
  compiles; ``0`` never uses it; ``build`` compiles it in the foreground when missing;
  ``background`` starts one low-priority build in another process when missing (this run
  stays on the Python path, later ones are fast).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

__all__ = ["get", "build", "ensure", "forced", "status", "cache_dir", "compiler_available", "SOURCE"]

SOURCE = Path(__file__).with_name("gradviz_native.cpp")
_STALE_LOCK_S = 600.0
_state: dict[str, object] = {}


def _key() -> str:
    key = _state.get("key")
    if key is None:
        key = _state["key"] = _compute_key()
    return key  # type: ignore[return-value]


def _compute_key() -> str:
    import torch

    h = hashlib.sha256(SOURCE.read_bytes())
    cxx11_abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)     # libtorch's C++ string ABI
    python_abi = sysconfig.get_config_var("SOABI") or sys.implementation.cache_tag
    h.update(f"{torch.__version__}|cxx11abi={cxx11_abi}|{python_abi}|{platform.system()}|{platform.machine()}".encode())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    base = os.environ.get("GRADVIZ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gradviz")
    return Path(base) / "native" / _key()


def _name() -> str:
    return f"gradviz_native_{_key()}"


def _built_file() -> Path | None:
    """The built module, once its build finished (a build in progress has no ``ready`` mark)."""
    folder = cache_dir()
    if not (folder / "ready").is_file():
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        f = folder / f"{_name()}{suffix}"
        if f.is_file():
            return f
    hits = sorted(folder.glob(f"{_name()}*.so")) + sorted(folder.glob(f"{_name()}*.pyd"))
    return hits[0] if hits else None


def _import(path: Path) -> ModuleType:
    import torch  # noqa: F401  (libtorch's symbols first)

    loader = importlib.machinery.ExtensionFileLoader(_name(), str(path))
    spec = importlib.util.spec_from_file_location(_name(), str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def compiler_available() -> bool:
    return bool(shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")) \
        and bool(shutil.which("ninja") or _ninja_module())


def _ninja_module() -> bool:
    try:
        import ninja  # noqa: F401
    except ImportError:
        return False
    return True


def build(verbose: bool = False) -> ModuleType:
    """Compile the module now (blocking) into the cache, and load it. Raises on failure."""
    from torch.utils import cpp_extension

    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    module = cpp_extension.load(name=_name(), sources=[str(SOURCE)], build_directory=str(folder),
                                extra_cflags=["-O3"], verbose=verbose)
    (folder / "ready").write_text(f"{time.time()}\n")     # only now may other processes load it
    _state["module"] = module
    _state["build_seconds"] = time.perf_counter() - t0
    return module


def ensure() -> ModuleType:
    """The module, built now if it is not in the cache (whatever ``GRADVIZ_NATIVE`` says)."""
    if _state.get("module") is not None:
        return _state["module"]  # type: ignore[return-value]
    path = _built_file()
    module = _import(path) if path is not None else build()
    _state["module"] = module
    return module


@contextlib.contextmanager
def forced(module: ModuleType | None):
    """Inside the block ``get()`` returns ``module`` (None: the Python paths). For tests and
    benchmarks that compare the two paths in one process."""
    missing = object()
    saved = _state.get("module", missing)
    _state["module"] = module
    try:
        yield module
    finally:
        if saved is missing:
            _state.pop("module", None)
        else:
            _state["module"] = saved


def _mode() -> str:
    return (os.environ.get("GRADVIZ_NATIVE") or "auto").strip().lower()


def get() -> ModuleType | None:
    """The loaded module, or None (disabled, not built yet, or failed to load).

    Compiles only when ``GRADVIZ_NATIVE`` asks for it (see the module docstring)."""
    if "module" in _state:
        return _state["module"]  # type: ignore[return-value]
    mode = _mode()
    if mode in ("0", "off", "no", "false"):
        return None
    module = None
    path = _built_file()
    if path is not None:
        try:
            module = _import(path)
        except Exception as exc:               # a broken cache entry: say so, run in Python
            _state["error"] = f"{type(exc).__name__}: {exc}"
            log.warning("gradviz: the native accelerator in %s does not load (%s); using Python", path, exc)
    elif mode == "build":
        try:
            module = build()
        except Exception as exc:               # no compiler, a compile error: say so, run in Python
            _state["error"] = f"{type(exc).__name__}: {exc}"
            log.warning("gradviz: building the native accelerator failed (%s); using Python", exc)
    elif mode == "background":
        _background_build()
    if module is not None:
        _state["module"] = module
    return module


def status() -> dict:
    """Where the module is and whether it is loaded (for ``gradviz native`` and bug reports)."""
    path = _built_file()
    return {"mode": _mode(), "built": path is not None, "path": str(path) if path else str(cache_dir()),
            "loaded": "module" in _state and _state["module"] is not None, "error": _state.get("error"),
            "compiler": compiler_available(), "build_seconds": _state.get("build_seconds")}


def _background_build() -> None:
    """Start one low-priority build in another process (at most one per cache key at a time)."""
    if _state.get("background") or not compiler_available():
        return
    _state["background"] = True
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = folder / "building.lock"
        try:
            if lock.exists() and time.time() - lock.stat().st_mtime > _STALE_LOCK_S:
                lock.unlink()
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return                              # another process is building it
        os.close(fd)
        package_root = str(Path(__file__).resolve().parents[3])     # importable however we were
        env = dict(os.environ, GRADVIZ_NATIVE="0",
                   PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
        cmd = [sys.executable, "-m", "gradviz.core.native", "--build", "--lock", str(lock)]
        if hasattr(os, "nice"):
            cmd = ["nice", "-n", "19"] + cmd if shutil.which("nice") else cmd
        subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:                      # the run goes on in Python
        log.warning("gradviz: could not start a background build of the native accelerator (%s)", exc)


def _main(argv: list[str]) -> int:
    lock = argv[argv.index("--lock") + 1] if "--lock" in argv else None
    try:
        if "--build" in argv:
            build(verbose="--verbose" in argv)
        return 0
    except Exception as exc:
        print(f"gradviz native build failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if lock:
            try:
                os.unlink(lock)
            except FileNotFoundError:
                pass


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
