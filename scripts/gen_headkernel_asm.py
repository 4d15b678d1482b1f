# Writes agrl/learn/headkernel_avx512_amd64.s, the LM head's AVX-512 kernels (unrolled), so
# that a change is made once here: python3 scripts/gen_headkernel_asm.py; then go test.
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

# dot8x2: 8 rows of x (row step ldx floats) × 2 rows of w (row step ldw floats)
P("""// func dot8x2AVX512(n16 int, x *float32, ldx int, w *float32, ldw int, u *[16][4]float32)
//
// u[2r+c] for row r < 8 of x and row c < 2 of w. Z0–Z15 the accumulators (Z[2r+c]), Z16–Z17
// the rows of w at k, Z18 a row of x; x's rows through SI (0–2), R13 (3–5), R14 (6–7).
TEXT ·dot8x2AVX512(SB), NOSPLIT, $0-48
	MOVQ n16+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ ldx+16(FP), R8
	SHLQ $2, R8
	MOVQ w+24(FP), DI
	MOVQ ldw+32(FP), R10
	SHLQ $2, R10
	MOVQ u+40(FP), BX
	LEAQ (SI)(R8*2), R13
	ADDQ R8, R13
	LEAQ (R13)(R8*2), R14
	ADDQ R8, R14""")
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
        P("\tLEAQ (DI)(R10*2), R13\n\tADDQ R10, R13")
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
