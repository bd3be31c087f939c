"""Ship the kernel sources inside the package (xkernels/_csrc) so that a wheel can JIT-build.

Editable installs read them from the repository instead (see pkg/xkernels/_paths.py).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithSources(build_py):
    def run(self):
        super().run()
        root = Path(__file__).resolve().parent
        dst = Path(self.build_lib) / "xkernels" / "_csrc"
        for d in ("include", "bindings"):
            shutil.copytree(root / d, dst / d, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithSources})
