# Writes agrl/learn/headkernel_avx512_amd64.s and headkernel_avx2_amd64.s, the LM head's AVX-512
# and AVX2 kernels (unrolled), so that a change is made once here:
# python3 scripts/gen_headkernel_asm.py; then go test.
import os
out = []
P = out.append
P("""//go:build amd64 && goexperiment.simd

#include "textflag.h"

// The AVX-512 kernels of the LM head's dot products (headkernel.go, headkernel_simd.go). Each
// logit's 16 partial sums (lane l: the products at k ≡ l mod 16, one chain of VFMADD231PS in
// increasing k, from 0) stay in a register; at the end each is folded to 4 sums, u[l] =
// (s[l] + s[l+8]) + (s[l+4] + s[l+12]) as t[l] + t[l+4] with t[l] = s[l] + s[l+8], and
// stored; dotFinish adds the 4 in Go. n16 is the number of 16-wide blocks of k.
//
// Written by scripts/gen_headkernel_asm.py: edit that, not this file.
""")

def fold(acc, off, base="BX"):
    P(f"\tVEXTRACTF64X4 $1, Z{acc}, Y30")
    P(f"\tVADDPS Y30, Y{acc}, Y{acc}")
    P(f"\tVEXTRACTF32X4 $1, Y{acc}, X30")
    P(f"\tVADDPS X30, X{acc}, X{acc}")
    P(f"\tVMOVUPS X{acc}, {off}({base})")

def xw_args():
    """The kernels' common arguments: x and its row step (bytes) in SI and R8, w and its row
    step in DI and R10, at the frame offsets of (n16, x, ldx, w, ldw, …)."""
    P("\tMOVQ x+8(FP), SI\n\tMOVQ ldx+16(FP), R8\n\tSHLQ $2, R8")
    P("\tMOVQ w+24(FP), DI\n\tMOVQ ldw+32(FP), R10\n\tSHLQ $2, R10")

def row3(base, step, dst):
    """dst = base + 3·step: the fourth row of a block (x86 scales go up to 8, not 3)."""
    P(f"\tLEAQ ({base})({step}*2), {dst}\n\tADDQ {step}, {dst}")

# dot8x2: 8 rows of x (row step ldx floats) × 2 rows of w (row step ldw floats)
P("""// func dot8x2AVX512(n16 int, x *float32, ldx int, w *float32, ldw int, u *[16][4]float32)
//
// u[2r+c] for row r < 8 of x and row c < 2 of w. Z0–Z15 the accumulators (Z[2r+c]), Z16–Z17
// the rows of w at k, Z18 a row of x; x's rows through SI (0–2), R13 (3–5), R14 (6–7).
TEXT ·dot8x2AVX512(SB), NOSPLIT, $0-48
	MOVQ n16+0(FP), CX""")
xw_args()
P("\tMOVQ u+40(FP), BX")
row3("SI", "R8", "R13")
row3("R13", "R8", "R14")
for i in range(16):
    P(f"\tVPXORD Z{i}, Z{i}, Z{i}")
P("\tTESTQ CX, CX\n\tJZ fold8x2\nloop8x2:")
P("\tVMOVUPS (DI), Z16\n\tVMOVUPS (DI)(R10*1), Z17")
rows = ["(SI)", "(SI)(R8*1)", "(SI)(R8*2)", "(R13)", "(R13)(R8*1)", "(R13)(R8*2)", "(R14)", "(R14)(R8*1)"]
for r, a in enumerate(rows):
    P(f"\tVMOVUPS {a}, Z18")
    P(f"\tVFMADD231PS Z16, Z18, Z{2*r}")
    P(f"\tVFMADD231PS Z17, Z18, Z{2*r+1}")
P("\tADDQ $64, SI\n\tADDQ $64, R13\n\tADDQ $64, R14\n\tADDQ $64, DI\n\tDECQ CX\n\tJNZ loop8x2\nfold8x2:")
for i in range(16):
    fold(i, 16*i)
P("\tVZEROUPPER\n\tRET\n")

def onexm(m):
    P(f"""// func dot1x{m}AVX512(n16 int, x *float32, w *float32, ldw int, u *[{m}][4]float32)
//
// u[c] for one row x and rows c < {m} of w (row step ldw floats). Z0–Z{m-1} the accumulators,
// Z16 x at k; w's rows through {"DI (0–2) and R13 (3)" if m > 2 else "DI"}.
TEXT ·dot1x{m}AVX512(SB), NOSPLIT, $0-40
	MOVQ n16+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DI
	MOVQ ldw+24(FP), R10
	SHLQ $2, R10
	MOVQ u+32(FP), BX""")
    if m > 2:
        row3("DI", "R10", "R13")
    for i in range(m):
        P(f"\tVPXORD Z{i}, Z{i}, Z{i}")
    P(f"\tTESTQ CX, CX\n\tJZ fold1x{m}\nloop1x{m}:")
    P("\tVMOVUPS (SI), Z16")
    ws = ["(DI)", "(DI)(R10*1)", "(DI)(R10*2)", "(R13)"]
    for c in range(m):
        P(f"\tVFMADD231PS {ws[c]}, Z16, Z{c}")
    P("\tADDQ $64, SI\n\tADDQ $64, DI" + ("\n\tADDQ $64, R13" if m > 2 else ""))
    P(f"\tDECQ CX\n\tJNZ loop1x{m}\nfold1x{m}:")
    for i in range(m):
        fold(i, 16*i)
    P("\tVZEROUPPER\n\tRET\n")

onexm(4)
onexm(2)
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "agrl", "learn", "headkernel_avx512_amd64.s"), "w").write("\n".join(out) + "\n")

# The AVX2 kernel (machines without AVX-512), in its own file.
out = []
P = out.append
P("""//go:build amd64 && goexperiment.simd

#include "textflag.h"

// The AVX2 kernel of the LM head's dot products (headkernel.go, headkernel_simd.go). A logit's
// 16 partial sums are two 8-lane halves on AVX2 (lanes k ≡ 0–7 and k ≡ 8–15 mod 16), two
// independent chains of VFMADD231PS in increasing k from 0; this kernel runs all the low
// halves of a block first and then all the high halves, so that twelve logits fit in the 16
// registers. At the end t = lo + hi, u[l] = t[l] + t[l+4] and the logit (u[0] + u[2]) +
// (u[1] + u[3]): the operations of the AVX-512 kernels with dotFinish and of the Go AVX2 loop,
// so the same bits. The products past the last 16-wide block are left to the caller.
//
// Written by scripts/gen_headkernel_asm.py: edit that, not this file.

// func dot4x3AVX2(n16 int, x *float32, ldx int, w *float32, ldw int, y *float32, ldy int, lo *[12][8]float32)
//
// y[r·ldy + c] for row r < 4 of x and row c < 3 of w; lo holds the low halves' sums between
// the two passes. Y0–Y11 the accumulators (Y[3r+c]), Y12–Y14 the rows of w at k, Y15 a row
// of x; x's rows through SI (0–2) and R13 (3), y's through DX (0–2) and R12 (3). Per 8-lane
// step: 7 loads, 12 multiply-adds.
TEXT ·dot4x3AVX2(SB), NOSPLIT, $0-64""")
xw_args()
P("\tMOVQ y+40(FP), DX\n\tMOVQ ldy+48(FP), R11\n\tSHLQ $2, R11\n\tMOVQ lo+56(FP), BX")
row3("SI", "R8", "R13")
row3("DX", "R11", "R12")

def half(h):
    for i in range(12):
        P(f"\tVXORPS Y{i}, Y{i}, Y{i}")
    P(f"\tMOVQ n16+0(FP), CX\n\tTESTQ CX, CX\n\tJZ done4x3h{h}\nloop4x3h{h}:")
    P("\tVMOVUPS (DI), Y12\n\tVMOVUPS (DI)(R10*1), Y13\n\tVMOVUPS (DI)(R10*2), Y14")
    xs = ["(SI)", "(SI)(R8*1)", "(SI)(R8*2)", "(R13)"]
    for r, a in enumerate(xs):
        P(f"\tVMOVUPS {a}, Y15")
        for c in range(3):
            P(f"\tVFMADD231PS Y{12+c}, Y15, Y{3*r+c}")
    P(f"\tADDQ $64, SI\n\tADDQ $64, R13\n\tADDQ $64, DI\n\tDECQ CX\n\tJNZ loop4x3h{h}\ndone4x3h{h}:")

P("\t// the low halves: lanes k ≡ 0–7 of each 16-wide block")
half(0)
for i in range(12):
    P(f"\tVMOVUPS Y{i}, {32*i}(BX)")
P("""	// the high halves: back to the start, 8 floats on
	MOVQ x+8(FP), SI
	ADDQ $32, SI""")
row3("SI", "R8", "R13")
P("\tMOVQ w+24(FP), DI\n\tADDQ $32, DI")
half(1)
P("\t// t = lo + hi, u[l] = t[l] + t[l+4], then (u0 + u2) + (u1 + u3) into y")
ys = ["(DX)", "(DX)(R11*1)", "(DX)(R11*2)", "(R12)"]
for i in range(12):
    r, c = divmod(i, 3)
    P(f"\tVMOVUPS {32*i}(BX), Y12")
    P(f"\tVADDPS Y{i}, Y12, Y{i}")
    P(f"\tVEXTRACTF128 $1, Y{i}, X12")
    P(f"\tVADDPS X12, X{i}, X{i}")
    P(f"\tVMOVHLPS X{i}, X{i}, X12")
    P(f"\tVADDPS X12, X{i}, X{i}")
    P(f"\tVMOVSHDUP X{i}, X12")
    P(f"\tVADDSS X12, X{i}, X{i}")
    off = f"{4*c}" if c else ""
    P(f"\tVMOVSS X{i}, {off}{ys[r]}")
P("\tVZEROUPPER\n\tRET")
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "agrl", "learn", "headkernel_avx2_amd64.s"), "w").write("\n".join(out) + "\n")
