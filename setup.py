"""Build hook: the wheel carries the repository's ``samples/`` as ``gradviz/samples/``.

Everything else is declared in pyproject.toml. The samples (the built-in digits MLP the app opens
by default, its data, the other samples and the planted-bug scripts) live at the repository's top
level, where the tests and the README use them; ``gradviz.resources.samples_dir`` finds them in
either place.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithSamples(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "gradviz" / "samples"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(HERE / "samples", target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithSamples})
