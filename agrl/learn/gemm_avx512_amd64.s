//go:build amd64 && goexperiment.simd

#include "textflag.h"

// kernel8x32AVX512 is the AVX-512 product kernel for 8 rows × 32 columns of C; see gemm_simd.go
// for its contract and for why it is written in assembly.
//
// func kernel8x32AVX512(kk int, a *float32, ai, ak int, b *float32, ldb int, c *float32, ldc int, load bool)
//
// Registers: Z0–Z15 hold C's 8×32 block (two 16-lane halves per row), Z16–Z17 the row of B at
// k, Z18–Z19 the broadcast A(i, k). A's rows are read through three pointers (rows 0–2 from
// SI, 3–5 from R13, 6–7 from R14, at 0, 1 and 2 row steps from each), all three advanced by
// A's k step. Every element of C is one chain of VFMADD231PS over k in increasing order,
// starting from C (load) or from 0. Each step prefetches B's row 32 steps ahead (AX bytes):
// B's rows are ldb apart, a stride the hardware's prefetchers follow late when B streams from
// memory, as a decoding step's weights do (docs/performance.md, "Prefetching the weights").
TEXT ·kernel8x32AVX512(SB), NOSPLIT, $0-65
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
	LEAQ (R13)(R8*2), R14
	ADDQ R8, R14             // R14: A's row 6
	LEAQ (DX)(R11*2), R12
	ADDQ R11, R12            // R12: C's row 3
	LEAQ (R12)(R11*2), BX
	ADDQ R11, BX             // BX: C's row 6
	MOVBLZX load+64(FP), AX
	TESTQ AX, AX
	JZ zero
	VMOVUPS (DX), Z0
	VMOVUPS 64(DX), Z1
	VMOVUPS (DX)(R11*1), Z2
	VMOVUPS 64(DX)(R11*1), Z3
	VMOVUPS (DX)(R11*2), Z4
	VMOVUPS 64(DX)(R11*2), Z5
	VMOVUPS (R12), Z6
	VMOVUPS 64(R12), Z7
	VMOVUPS (R12)(R11*1), Z8
	VMOVUPS 64(R12)(R11*1), Z9
	VMOVUPS (R12)(R11*2), Z10
	VMOVUPS 64(R12)(R11*2), Z11
	VMOVUPS (BX), Z12
	VMOVUPS 64(BX), Z13
	VMOVUPS (BX)(R11*1), Z14
	VMOVUPS 64(BX)(R11*1), Z15
	JMP start

zero:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15

start:
	TESTQ CX, CX
	JZ done
	MOVQ R10, AX
	SHLQ $5, AX              // AX: 32 rows of B ahead, bytes (the prefetch distance)

loop:
	PREFETCHT0 (DI)(AX*1)
	PREFETCHT0 64(DI)(AX*1)
	VMOVUPS (DI), Z16
	VMOVUPS 64(DI), Z17
	VBROADCASTSS (SI), Z18
	VFMADD231PS Z16, Z18, Z0
	VFMADD231PS Z17, Z18, Z1
	VBROADCASTSS (SI)(R8*1), Z19
	VFMADD231PS Z16, Z19, Z2
	VFMADD231PS Z17, Z19, Z3
	VBROADCASTSS (SI)(R8*2), Z18
	VFMADD231PS Z16, Z18, Z4
	VFMADD231PS Z17, Z18, Z5
	VBROADCASTSS (R13), Z19
	VFMADD231PS Z16, Z19, Z6
	VFMADD231PS Z17, Z19, Z7
	VBROADCASTSS (R13)(R8*1), Z18
	VFMADD231PS Z16, Z18, Z8
	VFMADD231PS Z17, Z18, Z9
	VBROADCASTSS (R13)(R8*2), Z19
	VFMADD231PS Z16, Z19, Z10
	VFMADD231PS Z17, Z19, Z11
	VBROADCASTSS (R14), Z18
	VFMADD231PS Z16, Z18, Z12
	VFMADD231PS Z17, Z18, Z13
	VBROADCASTSS (R14)(R8*1), Z19
	VFMADD231PS Z16, Z19, Z14
	VFMADD231PS Z17, Z19, Z15
	ADDQ R9, SI
	ADDQ R9, R13
	ADDQ R9, R14
	ADDQ R10, DI
	DECQ CX
	JNZ loop

done:
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, (DX)(R11*1)
	VMOVUPS Z3, 64(DX)(R11*1)
	VMOVUPS Z4, (DX)(R11*2)
	VMOVUPS Z5, 64(DX)(R11*2)
	VMOVUPS Z6, (R12)
	VMOVUPS Z7, 64(R12)
	VMOVUPS Z8, (R12)(R11*1)
	VMOVUPS Z9, 64(R12)(R11*1)
	VMOVUPS Z10, (R12)(R11*2)
	VMOVUPS Z11, 64(R12)(R11*2)
	VMOVUPS Z12, (BX)
	VMOVUPS Z13, 64(BX)
	VMOVUPS Z14, (BX)(R11*1)
	VMOVUPS Z15, 64(BX)(R11*1)
	VZEROUPPER
	RET
