"""What the PyTorch peers (bench_peer.py, bench_llm_peer.py) share: the machine's name, Debian's
python3-torch with OpenBLAS installed when missing, and the environment OpenBLAS must run under
to use its best kernels on this CPU.

This workplace sets OPENBLAS_CORETYPE=Haswell and OPENBLAS_L2_SIZE=512 in every shell, which pin
OpenBLAS to its AVX2 kernels (about half its sgemm rate on an AVX-512 core: docs/performance.md);
OpenBLAS 0.3.21 left to itself misdetects Sapphire Rapids-class Intel cores as "Prescott" (SSE3)
and is then many times slower. So the peer runs with both variables dropped, and with
OPENBLAS_CORETYPE=SkylakeX on an Intel CPU: in the peer's process only, never in tests.
"""

import os
import subprocess
import sys

PY = "/usr/bin/python3"  # Debian's python, where python3-torch installs
_MARK = "AGRL_PEER_OPENBLAS_SET"  # set once the peer re-executed itself under torch_env()


def cpu_model():
    """The model name of the first CPU in /proc/cpuinfo."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def ensure_torch():
    """Installs python3-torch and OpenBLAS: without libopenblas0 Debian's torch links the
    reference BLAS (libblas3), measured at 6 GFLOP/s on a matmul where OpenBLAS does 118."""
    have = subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode == 0
    if have and os.path.exists("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"):
        return
    print("installing Debian's python3-torch and libopenblas0-pthread (apt-get)...", file=sys.stderr, flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "python3-torch", "libopenblas0-pthread"],
                   check=True, env=env)


def torch_env():
    """The PyTorch process's environment: the OpenBLAS variables dropped, SkylakeX forced on Intel."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    if "Intel" in cpu_model():
        env["OPENBLAS_CORETYPE"] = "SkylakeX"
    return env


def openblas_coretype():
    """How the peer's OpenBLAS picks its kernels: the core type forced, or "(detected)" (in the
    re-executed peer, what its environment says)."""
    env = os.environ if os.environ.get(_MARK) else torch_env()
    return env.get("OPENBLAS_CORETYPE", "(detected)")


def reexec_in_torch_env():
    """Re-executes this script under torch_env() unless it already runs there. Call it before
    importing torch: OpenBLAS reads its variables once, when the library loads."""
    if os.environ.get(_MARK):
        return
    env = dict(torch_env(), **{_MARK: "1"})
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
