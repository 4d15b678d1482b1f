//go:build amd64 && goexperiment.simd

#include "textflag.h"

// expSumsFMA is agent.SetExpSums' kernel; see expsums_simd.go for its contract. Four
// exponentials at a time, each computed with the steps and constants of math.Exp's amd64
// assembly on its FMA branch (the one math.Exp takes on a CPU with AVX and FMA): k = the
// nearest integer to d·log2(e); r = (d − k·ln2_hi − k·ln2_lo)/16, each difference one fused
// multiply-add; the Taylor polynomial of e^r − 1 in Horner form, fused; squared four times
// through y·(y + 2) (e^{2r} − 1 from e^r − 1), the last step fused with the + 1; and the
// product by 2^k. Every step is the same IEEE operation on each lane as in the scalar code, so
// each exponential has math.Exp's bits. The kernel takes only the blocks of four whose d all
// lie in [−700, 700], where neither routine reaches its branches for infinities, overflow or
// subnormal results; it stops at the first block with another d (−∞ from a −∞ logit, or one
// far below the maximum) and leaves it to the caller's loop. The sums then run in element
// order, one lane at a time, as the loop adds them.

// FOUR puts the constant v in the four float64 lanes at byte off of expc.
#define FOUR(off, v) \
	DATA expc<>+(off)(SB)/8, v; \
	DATA expc<>+(off+8)(SB)/8, v; \
	DATA expc<>+(off+16)(SB)/8, v; \
	DATA expc<>+(off+24)(SB)/8, v

FOUR(0, $1.4426950408889634073599246810018920) // log2(e)
FOUR(32, $0.69314718055966295651160180568695068359375) // ln 2, upper part
FOUR(64, $0.28235290563031577122588448175013436025525412068e-12) // ln 2, lower part
FOUR(96, $0.0625)
FOUR(128, $2.4801587301587301587e-5) // 1/8!
FOUR(160, $1.9841269841269841270e-4) // 1/7!
FOUR(192, $1.3888888888888888889e-3) // 1/6!
FOUR(224, $8.3333333333333333333e-3) // 1/5!
FOUR(256, $4.1666666666666666667e-2) // 1/4!
FOUR(288, $1.6666666666666666667e-1) // 1/3!
FOUR(320, $0.5) // 1/2!
FOUR(352, $1.0)
FOUR(384, $2.0)
FOUR(416, $700.0) // the range of d the kernel takes, |d| <= 700
FOUR(448, $0x7fffffffffffffff) // |·|
FOUR(480, $1023) // the exponent's bias
GLOBL expc<>(SB), RODATA|NOPTR, $512

// func expSumsFMA(z []float32, invT, mx, sum, sd float64) (n int, sum2, sd2 float64)
//
// Registers: Y14 invT, Y15 mx, Y13 the mask of |·|, Y12 700, Y11 2, Y10 1; X8 and X9 the running
// sums Σe and Σe·d; per block Y0 d then r then e, Y5 d, Y1 k (as float64), X2 k (int32), Y3
// the polynomial, Y4 2^k, Y6 e·d.
TEXT ·expSumsFMA(SB), NOSPLIT, $0-80
	MOVQ z_base+0(FP), SI
	MOVQ z_len+8(FP), CX
	VBROADCASTSD invT+24(FP), Y14
	VBROADCASTSD mx+32(FP), Y15
	MOVSD sum+40(FP), X8
	MOVSD sd+48(FP), X9
	VMOVUPD expc<>+448(SB), Y13
	VMOVUPD expc<>+416(SB), Y12
	VMOVUPD expc<>+384(SB), Y11
	VMOVUPD expc<>+352(SB), Y10
	XORQ AX, AX

loop:
	LEAQ 4(AX), DX
	CMPQ DX, CX
	JGT done
	VCVTPS2PD (SI)(AX*4), Y0     // float64(z[j])
	VMULPD Y14, Y0, Y0           // ·invT
	VSUBPD Y15, Y0, Y0           // d = x − mx
	VANDPD Y13, Y0, Y1
	VCMPPD $2, Y12, Y1, Y1       // |d| <= 700 (false for NaN)
	VMOVMSKPD Y1, DX
	CMPQ DX, $15
	JNE done
	VMOVAPD Y0, Y5
	VMULPD expc<>+0(SB), Y0, Y1  // d·log2(e)
	VCVTPD2DQY Y1, X2            // k, to the nearest (MXCSR's rounding, as CVTSD2SL)
	VCVTDQ2PD X2, Y1
	VFNMADD231PD expc<>+32(SB), Y1, Y0 // d − k·ln2_hi
	VFNMADD231PD expc<>+64(SB), Y1, Y0 // − k·ln2_lo
	VMULPD expc<>+96(SB), Y0, Y0       // r = · /16
	VMOVUPD expc<>+128(SB), Y3
	VFMADD213PD expc<>+160(SB), Y0, Y3 // p = p·r + c
	VFMADD213PD expc<>+192(SB), Y0, Y3
	VFMADD213PD expc<>+224(SB), Y0, Y3
	VFMADD213PD expc<>+256(SB), Y0, Y3
	VFMADD213PD expc<>+288(SB), Y0, Y3
	VFMADD213PD expc<>+320(SB), Y0, Y3
	VFMADD213PD expc<>+352(SB), Y0, Y3
	VMULPD Y3, Y0, Y0            // y = r·p ≈ e^r − 1
	VADDPD Y11, Y0, Y3           // y = y·(y + 2), three times
	VMULPD Y3, Y0, Y0
	VADDPD Y11, Y0, Y3
	VMULPD Y3, Y0, Y0
	VADDPD Y11, Y0, Y3
	VMULPD Y3, Y0, Y0
	VADDPD Y11, Y0, Y3
	VFMADD213PD Y10, Y3, Y0      // y·(y + 2) + 1
	VPMOVSXDQ X2, Y4
	VPADDQ expc<>+480(SB), Y4, Y4
	VPSLLQ $52, Y4, Y4           // 2^k
	VMULPD Y4, Y0, Y0            // e
	VMULPD Y5, Y0, Y6            // e·d
	VADDSD X0, X8, X8            // the sums, lane after lane
	VADDSD X6, X9, X9
	VPERMILPD $1, X0, X7
	VADDSD X7, X8, X8
	VPERMILPD $1, X6, X7
	VADDSD X7, X9, X9
	VEXTRACTF128 $1, Y0, X0
	VEXTRACTF128 $1, Y6, X6
	VADDSD X0, X8, X8
	VADDSD X6, X9, X9
	VPERMILPD $1, X0, X7
	VADDSD X7, X8, X8
	VPERMILPD $1, X6, X7
	VADDSD X7, X9, X9
	ADDQ $4, AX
	JMP loop

done:
	MOVQ AX, n+56(FP)
	MOVSD X8, sum2+64(FP)
	MOVSD X9, sd2+72(FP)
	VZEROUPPER
	RET
