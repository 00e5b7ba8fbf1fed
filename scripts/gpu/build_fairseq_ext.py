"""Build, in place, only the compiled parts of fairseq that the translation path imports.

Run from an unpacked fairseq(-fixed) source tree:  cd fairseq_fixed-0.12.3.1 && python build_fairseq_ext.py

On a short GPU lease the full wheel build (six extensions, about 2.5 minutes) costs more than
the study can spare; the translation path (fairseq-train / -generate with the translation
task, sacreBLEU scoring) imports three of them:
  fairseq.libbleu                       (C++; fairseq's own BLEU scorer, imported by generate)
  fairseq.data.data_utils_fast          (Cython; batching)
  fairseq.data.token_block_utils_fast   (Cython; imported by fairseq.data)
The others (libbase, libnat, libnat_cuda: model-parallel and non-autoregressive code) are left
out; an import of them fails loudly. Needs Cython, numpy and a C++ compiler; no torch.
"""
import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

if not os.path.isfile(os.path.join("fairseq", "clib", "libbleu", "libbleu.cpp")):
    sys.exit("build_fairseq_ext: run it from an unpacked fairseq source tree (fairseq/clib/libbleu missing)")

extensions = [
    Extension("fairseq.libbleu", sources=["fairseq/clib/libbleu/libbleu.cpp", "fairseq/clib/libbleu/module.cpp"],
              extra_compile_args=["-std=c++11"], language="c++"),
    Extension("fairseq.data.data_utils_fast", sources=["fairseq/data/data_utils_fast.pyx"],
              include_dirs=[numpy.get_include()], extra_compile_args=["-std=c++11"], language="c++"),
    Extension("fairseq.data.token_block_utils_fast", sources=["fairseq/data/token_block_utils_fast.pyx"],
              include_dirs=[numpy.get_include()], extra_compile_args=["-std=c++11"], language="c++"),
]
setup(name="fairseq-translation-extensions", script_args=["build_ext", "--inplace"],
      ext_modules=cythonize(extensions, language_level="3", quiet=True))
