"""Builds liblazyattn_c.so (the C ABI and the CUDA kernels, capi/ of the repository) with CMake
and nvcc, and ships it inside the lazyattn package. One step, no network:

    pip install --no-build-isolation ./python

Environment: LAZYATTN_PREBUILT_LIB=path/to/liblazyattn_c.so ships that file instead of building
(a library built on another machine of the same architecture); LAZYATTN_CUDA_ARCHITECTURES
(default 90a) and CMAKE_BUILD_PARALLEL_LEVEL (default: all cores) tune the build.
"""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LIB = "liblazyattn_c.so"


def build_library():
    prebuilt = os.environ.get("LAZYATTN_PREBUILT_LIB")
    if prebuilt:
        if not os.path.isfile(prebuilt):
            raise RuntimeError("lazyattn setup: LAZYATTN_PREBUILT_LIB=%s is not a file" % prebuilt)
        return prebuilt
    if not os.path.isfile(os.path.join(REPO, "capi", "lazyattn_c.h")):
        raise RuntimeError("lazyattn setup: %s is not the lazyattn repository (capi/ missing); "
                           "install from a checkout: pip install --no-build-isolation ./python"
                           % REPO)
    for tool in ("cmake", "nvcc"):
        if shutil.which(tool) is None and not os.path.exists("/usr/local/cuda/bin/" + tool):
            raise RuntimeError("lazyattn setup: %s not found; the package builds its CUDA "
                               "library with CMake and nvcc" % tool)
    env = dict(os.environ)
    env["PATH"] = env.get("PATH", "") + os.pathsep + "/usr/local/cuda/bin"
    build = os.path.join(REPO, "build", "python")
    arch = os.environ.get("LAZYATTN_CUDA_ARCHITECTURES", "90a")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.check_call(["cmake", "-S", REPO, "-B", build, *gen, "-DCMAKE_BUILD_TYPE=Release",
                           "-DLAZYATTN_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=" + arch,
                           "-DLAZYATTN_BUILD_TESTS=OFF", "-DLAZYATTN_BUILD_BENCHMARKS=OFF",
                           "-DLAZYATTN_BUILD_EXAMPLES=OFF", "-DLAZYATTN_INSTALL=OFF"], env=env)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    subprocess.check_call(["cmake", "--build", build, "--target", "lazyattn_c", "-j", jobs],
                          env=env)
    return os.path.join(build, "capi", LIB)


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        lib = build_library()
        dest = os.path.join(self.build_lib, "lazyattn", LIB)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(os.path.realpath(lib), dest)


setup(cmdclass={"build_py": BuildWithLibrary})
