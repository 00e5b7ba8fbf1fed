"""Build in place only the three compiled extensions of fairseq that translation uses
(libbleu: fairseq-generate's default scorer; the two Cython data helpers), in parallel.
fairseq's own setup.py also builds libbase / libnat / alignment torch extensions (not
imported on this path) and its ninja builds race under -j. Run from the unpacked sdist."""
import numpy
from setuptools import Extension, setup

args = ["-std=c++11", "-O3"]
setup(
    name="fairseq-ext",
    ext_modules=[
        Extension("fairseq.libbleu", ["fairseq/clib/libbleu/libbleu.cpp", "fairseq/clib/libbleu/module.cpp"],
                  extra_compile_args=args),
        Extension("fairseq.data.data_utils_fast", ["fairseq/data/data_utils_fast.pyx"], language="c++",
                  include_dirs=[numpy.get_include()], extra_compile_args=args),
        Extension("fairseq.data.token_block_utils_fast", ["fairseq/data/token_block_utils_fast.pyx"],
                  language="c++", include_dirs=[numpy.get_include()], extra_compile_args=args),
    ],
    script_args=["build_ext", "--inplace", "-j", "3"],
)
