#!/usr/bin/env python3
"""Which kernels two PTX files compile identically: SAME or DIFF per kernel, source-line
directives, comments and the numbering of labels ignored. The check that lets a commit reuse a measured build's figures
when it changes no kernel that was not measured (a refactor, a change confined to one build).

    PTXAS_REPORT_PTX=/tmp/A.ptx \
        scripts/ptxas-report bench/cuda/bench_decode.cu decode_kernel    # in each checkout
    python3 bench/tools/ptx_kernels_diff.py /tmp/A.ptx /tmp/B.ptx [REGEX]

REGEX (default `_kernel`) selects kernels by mangled name. SAME*: the same instructions once
virtual registers are numbered alike (%r12 and %r14 both read %r; the count declared by .reg
ignored): a neighbouring kernel's code moved nvcc's numbering, not this kernel's code. Exit
status 1 when any differs (SAME* included) or a kernel is in only one file.
"""
import re
import sys

HEADER = re.compile(r"^(?:\.visible |\.weak |\.extern )*\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)")


def kernels(path, pattern):
    """Mangled name -> body lines (without .loc / comments) of every .entry / .func."""
    out, name, body = {}, None, []
    for line in open(path):
        m = HEADER.match(line)
        if m:
            if name is not None:
                out[name] = body
            name, body = m.group(1), []
        if line.lstrip().startswith(".section"):  # debug sections (-lineinfo) follow the last function
            if name is not None:
                out[name] = body
            name, body = None, []
        if name is None:
            continue
        s = line.strip()
        if s.startswith(".loc") or s.startswith("//") or s.startswith(".file"):
            continue  # .file names the checkout's path
        s = re.sub(r"//.*$", "", s).rstrip()  # trailing comments ("{ // callseq 2, 0")
        # Labels and local depots are numbered by the function's place in the file, inline asm's
        # labels ("wait_%=" in mbarrier.cuh) by the asm statement's place in the translation unit.
        s = re.sub(r"\$L__BB\d+_", "$L__BB_", s)
        s = re.sub(r"\b(wait_)\d+\b", r"\1", s)
        body.append(re.sub(r"__local_depot\d+", "__local_depot", s))
    if name is not None:
        out[name] = body
    return {k: v for k, v in out.items() if re.search(pattern, k)}


def renumbered(body):
    """Body with every virtual register's number dropped and the .reg declarations left out."""
    return [re.sub(r"%(rd|rs|r|fd|f|p|h|hh|b)\d+", r"%\1", s) for s in body if not s.startswith(".reg")]


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    pattern = sys.argv[3] if len(sys.argv) == 4 else "_kernel"
    a, b = kernels(sys.argv[1], pattern), kernels(sys.argv[2], pattern)
    bad = 0
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b:
            state = "ONLY-" + ("A" if k in a else "B")
        else:
            state = "SAME" if a[k] == b[k] else "SAME*" if renumbered(a[k]) == renumbered(b[k]) else "DIFF"
        bad += state != "SAME"
        print(f"{state:6s} {k}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
