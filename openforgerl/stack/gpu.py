"""The optional GPU part: ``forge doctor`` says whether veRL training can run here."""

from __future__ import annotations

import shutil
import subprocess

from openforgerl.stack.part import Part, PartStatus


class GpuPart(Part):
    """A CUDA GPU, optional: the embedded default runs on CPU."""

    name = "gpu"
    optional = True

    def check(self) -> PartStatus:
        smi = shutil.which("nvidia-smi")
        if not smi:
            return self.status(False, "no GPU (nvidia-smi not found); vLLM runs on CPU, veRL training needs a GPU",
                               fix="none needed: forge train --backend local runs on CPU; "
                                   "--backend verl needs a GPU machine")
        try:
            out = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return self.status(False, f"nvidia-smi failed: {exc}", fix="check the NVIDIA driver")
        if out.returncode != 0 or not out.stdout.strip():
            return self.status(False, f"nvidia-smi found no GPU: {out.stderr.strip()[:200]}",
                               fix="check the NVIDIA driver")
        return self.status(True, "; ".join(line.strip() for line in out.stdout.splitlines()))
