"""The optional C core (``toolgrammar._native``): the vocabulary walks of ``toolgrammar.engine``.

Everything else is in ``pyproject.toml``. The extension is ``optional``: where no C compiler is found the
install goes on without it and the engine walks with numpy (same masks, slower first visits; the
``toolgrammar doctor``-style check is ``toolgrammar.native.available()``).
"""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "toolgrammar._native",
            sources=["src/toolgrammar/_native.c"],
            extra_compile_args=["-O3"],
            libraries=[] if sys.platform == "win32" else ["m"],  # exp, log1p (pour)
            optional=True,
        )
    ]
)
