#!/usr/bin/python3
"""Executes GoNB notebooks headlessly and fails loudly on the first failing cell.

Usage: run_notebooks.py [--inplace] [--timeout S] NOTEBOOK...

Each notebook runs in its own directory with a fresh kernel (every GoNB cell is a new Go
process). On a failing cell this prints the notebook, the cell number, its source and its
outputs, then exits 1. With --inplace the executed notebook (outputs included) is written back.
Environment variables such as AGRL_QUICK are passed through to the kernel.
"""
import argparse
import os
import sys
import tempfile
import time

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError


def show_outputs(cell):
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            sys.stderr.write(out.get("text", ""))
        elif kind == "error":
            sys.stderr.write("%s: %s\n" % (out.get("ename"), out.get("evalue")))
            sys.stderr.write("\n".join(out.get("traceback", [])) + "\n")
        elif kind in ("display_data", "execute_result"):
            data = out.get("data", {})
            text = data.get("text/plain") or data.get("text/html") or ""
            if text:
                sys.stderr.write(str(text)[:4000] + "\n")


def coalesce_streams(cell):
    """Merges consecutive stdout (or stderr) outputs: GoNB forwards output in chunks as they
    arrive, so without this the same output splits differently from run to run."""
    merged = []
    for out in cell.get("outputs", []):
        if (out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")):
            merged[-1]["text"] = merged[-1]["text"] + out["text"]
        else:
            merged.append(out)
    cell["outputs"] = merged


def run(path, timeout, inplace):
    nb = nbformat.read(path, as_version=4)
    # No timing metadata: committed notebooks then change only when their outputs do.
    client = NotebookClient(nb, timeout=timeout, kernel_name="gonb", record_timing=False,
                            resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
    start = time.time()
    failed = None
    # The kernel's own log (GoNB's start-up notes, e.g. that the optional gopls is missing) goes
    # to a file, shown only when the notebook fails.
    log = tempfile.TemporaryFile()
    try:
        client.execute(stdout=log, stderr=log)
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:
        failed = e
    # nbclient stops at the first failing cell; find it by its error output, or the last executed cell.
    if failed is None:
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                failed = "cell %d has an error output" % i
                break
    if failed is not None:
        bad = None
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                bad = i
                break
        if bad is None:
            executed = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("execution_count")]
            bad = executed[-1] if executed else 0
        cell = nb.cells[bad]
        sys.stderr.write("\nFAIL %s: cell %d failed after %.0fs\n--- source ---\n%s\n--- outputs ---\n"
                         % (path, bad, time.time() - start, cell.source))
        show_outputs(cell)
        sys.stderr.write("--- error ---\n%s\n" % str(failed)[-3000:])
        log.seek(0)
        kernel_log = log.read().decode("utf-8", "replace").strip()
        if kernel_log:
            sys.stderr.write("--- kernel log (last 3000 characters) ---\n%s\n" % kernel_log[-3000:])
        return False
    if inplace:
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
            if cell.cell_type == "code":
                coalesce_streams(cell)
        nbformat.write(nb, path)
    print("ok   %s (%.0fs)" % (path, time.time() - start), flush=True)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inplace", action="store_true", help="write the executed notebook back")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    ap.add_argument("notebooks", nargs="+")
    args = ap.parse_args()
    ok = True
    for path in args.notebooks:
        ok = run(path, args.timeout, args.inplace) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
