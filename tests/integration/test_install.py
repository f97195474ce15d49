"""`make install` output is usable: the installed header, libraries and pkg-config file build
and run the example program, with the shared and with the static library."""
import os
import subprocess

import pytest

from conftest import BUILD, ROOT


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix")
    subprocess.run(["cmake", "--install", BUILD, "--prefix", str(p)], check=True,
                   capture_output=True)
    return p


def pkg_config(prefix, *args):
    libdir = next(d for d in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu")
                  if os.path.exists(prefix / d / "pkgconfig" / "hearth.pc"))
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / libdir / "pkgconfig"))
    out = subprocess.run(["pkg-config", *args, "hearth"], check=True, capture_output=True,
                         text=True, env=env).stdout.split()
    return out, prefix / libdir


def test_installed_files(prefix):
    assert (prefix / "bin" / "hearth").exists()
    assert (prefix / "include" / "hearth.h").exists()
    _, libdir = pkg_config(prefix, "--libs")
    assert (libdir / "libhearth.a").exists() and (libdir / "libhearth.so").exists()


@pytest.mark.parametrize("static", [False, True])
def test_example_builds_against_the_installed_library(prefix, tmp_path, starter, static):
    flags, libdir = pkg_config(prefix, "--cflags", "--libs", *(["--static"] if static else []))
    exe = tmp_path / "model_info"
    cmd = ["cc", os.path.join(ROOT, "examples", "model_info.c"), *flags, "-o", str(exe)]
    if static:
        cmd.insert(1, "-static-libgcc")
        cmd = [c if c != "-lhearth" else str(libdir / "libhearth.a") for c in cmd]
    subprocess.run(cmd, check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    out = subprocess.run([str(exe), "smollm2"], check=True, capture_output=True, text=True,
                         env=env).stdout
    assert out.startswith("llama (gguf): 30 layers, hidden 576, vocab 49152, 134515008 parameters")


def test_generate_example_answers(prefix, tmp_path, starter):
    flags, libdir = pkg_config(prefix, "--cflags", "--libs")
    exe = tmp_path / "generate"
    subprocess.run(["cc", os.path.join(ROOT, "examples", "generate.c"), *flags, "-o", str(exe)],
                   check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    out = subprocess.run([str(exe), "smollm2", "What is the capital of France?"], check=True,
                         capture_output=True, text=True, env=env, timeout=300).stdout
    assert "Paris" in out and "prompt tokens" in out
