//go:build amd64 && goexperiment.simd

#include "textflag.h"

// kernel6x16FMA is the AVX2 (+FMA) product kernel for 6 rows × 16 columns of C; see
// gemm_avx2.go for its contract and for why it is written in assembly.
//
// func kernel6x16FMA(kk int, a *float32, ai, ak int, b *float32, ldb int, c *float32, ldc int, pf int, load bool)
//
// Registers: Y0–Y11 hold C's 6×16 block (two 8-lane halves per row), Y12–Y13 the row of B at k,
// Y14–Y15 the broadcast A(i, k). Every element of C is one chain of VFMADD231PS over k in
// increasing order, starting from C (load) or from 0. With pf > 0 each step prefetches B's row
// pf steps ahead (AX bytes; the two lines a 16-column row may straddle), as kernel8x32AVX512
// does; with pf = 0 the loop has no prefetch (the same arithmetic, STEP below).
#define STEP \
	VMOVUPS (DI), Y12; \
	VMOVUPS 32(DI), Y13; \
	VBROADCASTSS (SI), Y14; \
	VFMADD231PS Y12, Y14, Y0; \
	VFMADD231PS Y13, Y14, Y1; \
	VBROADCASTSS (SI)(R8*1), Y15; \
	VFMADD231PS Y12, Y15, Y2; \
	VFMADD231PS Y13, Y15, Y3; \
	VBROADCASTSS (SI)(R8*2), Y14; \
	VFMADD231PS Y12, Y14, Y4; \
	VFMADD231PS Y13, Y14, Y5; \
	VBROADCASTSS (R13), Y15; \
	VFMADD231PS Y12, Y15, Y6; \
	VFMADD231PS Y13, Y15, Y7; \
	VBROADCASTSS (R13)(R8*1), Y14; \
	VFMADD231PS Y12, Y14, Y8; \
	VFMADD231PS Y13, Y14, Y9; \
	VBROADCASTSS (R13)(R8*2), Y15; \
	VFMADD231PS Y12, Y15, Y10; \
	VFMADD231PS Y13, Y15, Y11; \
	ADDQ R9, SI; \
	ADDQ R9, R13; \
	ADDQ R10, DI

TEXT ·kernel6x16FMA(SB), NOSPLIT, $0-73
	MOVQ kk+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ ai+16(FP), R8
	SHLQ $2, R8              // A's row step, bytes
	MOVQ ak+24(FP), R9
	SHLQ $2, R9              // A's k step, bytes
	MOVQ b+32(FP), DI
	MOVQ ldb+40(FP), R10
	SHLQ $2, R10             // B's row step, bytes
	MOVQ c+48(FP), DX
	MOVQ ldc+56(FP), R11
	SHLQ $2, R11             // C's row step, bytes
	LEAQ (SI)(R8*2), R13
	ADDQ R8, R13             // R13: A's row 3
	LEAQ (DX)(R11*2), R12
	ADDQ R11, R12            // R12: C's row 3
	MOVBLZX load+72(FP), AX
	TESTQ AX, AX
	JZ zero
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS (DX)(R11*1), Y2
	VMOVUPS 32(DX)(R11*1), Y3
	VMOVUPS (DX)(R11*2), Y4
	VMOVUPS 32(DX)(R11*2), Y5
	VMOVUPS (R12), Y6
	VMOVUPS 32(R12), Y7
	VMOVUPS (R12)(R11*1), Y8
	VMOVUPS 32(R12)(R11*1), Y9
	VMOVUPS (R12)(R11*2), Y10
	VMOVUPS 32(R12)(R11*2), Y11
	JMP start

zero:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

start:
	TESTQ CX, CX
	JZ done
	MOVQ pf+64(FP), AX
	TESTQ AX, AX
	JZ plain
	IMULQ R10, AX            // AX: pf rows of B ahead, bytes (the prefetch distance)

prefetch:
	PREFETCHT0 (DI)(AX*1)
	PREFETCHT0 32(DI)(AX*1)
	STEP
	DECQ CX
	JNZ prefetch
	JMP done

plain:
	STEP
	DECQ CX
	JNZ plain

done:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, (DX)(R11*1)
	VMOVUPS Y3, 32(DX)(R11*1)
	VMOVUPS Y4, (DX)(R11*2)
	VMOVUPS Y5, 32(DX)(R11*2)
	VMOVUPS Y6, (R12)
	VMOVUPS Y7, 32(R12)
	VMOVUPS Y8, (R12)(R11*1)
	VMOVUPS Y9, 32(R12)(R11*1)
	VMOVUPS Y10, (R12)(R11*2)
	VMOVUPS Y11, 32(R12)(R11*2)
	VZEROUPPER
	RET
