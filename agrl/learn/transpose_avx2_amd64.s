//go:build amd64 && goexperiment.simd

#include "textflag.h"

// transpose8AVX2 transposes one 8×8 tile of float32s: dst[j·ldd + i] = src[i·lds + j] for i,
// j in [0, 8), or adds it (add: dst[j·ldd + i] += src[i·lds + j], one addition an element,
// the bits of the scalar loop). See transpose_simd.go.
//
// func transpose8AVX2(src *float32, lds int, dst *float32, ldd int, add bool)
//
// The 8 rows of src go into Y0–Y7. VUNPCKLPS/VUNPCKHPS interleave pairs of rows (Y8–Y15);
// VSHUFPS then takes pairs of those two columns at a time, so that in each 128-bit lane Y(4g+j)
// holds column j (low lane) or 4+j (high lane) of rows 4g…4g+3; VPERM2F128 joins the lanes of
// rows 0–3 and 4–7, leaving row j of dst in Y(8+j).
TEXT ·transpose8AVX2(SB), NOSPLIT, $0-33
	MOVQ src+0(FP), SI
	MOVQ lds+8(FP), R8
	SHLQ $2, R8              // src's row step, bytes
	MOVQ dst+16(FP), DI
	MOVQ ldd+24(FP), R10
	SHLQ $2, R10             // dst's row step, bytes
	VMOVUPS (SI), Y0
	ADDQ R8, SI
	VMOVUPS (SI), Y1
	ADDQ R8, SI
	VMOVUPS (SI), Y2
	ADDQ R8, SI
	VMOVUPS (SI), Y3
	ADDQ R8, SI
	VMOVUPS (SI), Y4
	ADDQ R8, SI
	VMOVUPS (SI), Y5
	ADDQ R8, SI
	VMOVUPS (SI), Y6
	ADDQ R8, SI
	VMOVUPS (SI), Y7
	// Rows 2p and 2p+1 interleaved, 32 bits at a time.
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15
	// Y(4g+j): column j of rows 4g…4g+3 in the low lane, column 4+j in the high one.
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7
	// Row j of dst: the low lanes (j < 4) or the high ones of Yj and Y(4+j).
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y7, Y3, Y15
	MOVBLZX add+32(FP), AX
	TESTQ AX, AX
	JNZ addrows
	VMOVUPS Y8, (DI)
	ADDQ R10, DI
	VMOVUPS Y9, (DI)
	ADDQ R10, DI
	VMOVUPS Y10, (DI)
	ADDQ R10, DI
	VMOVUPS Y11, (DI)
	ADDQ R10, DI
	VMOVUPS Y12, (DI)
	ADDQ R10, DI
	VMOVUPS Y13, (DI)
	ADDQ R10, DI
	VMOVUPS Y14, (DI)
	ADDQ R10, DI
	VMOVUPS Y15, (DI)
	VZEROUPPER
	RET

addrows:
	VADDPS (DI), Y8, Y8
	VMOVUPS Y8, (DI)
	ADDQ R10, DI
	VADDPS (DI), Y9, Y9
	VMOVUPS Y9, (DI)
	ADDQ R10, DI
	VADDPS (DI), Y10, Y10
	VMOVUPS Y10, (DI)
	ADDQ R10, DI
	VADDPS (DI), Y11, Y11
	VMOVUPS Y11, (DI)
	ADDQ R10, DI
	VADDPS (DI), Y12, Y12
	VMOVUPS Y12, (DI)
	ADDQ R10, DI
	VADDPS (DI), Y13, Y13
	VMOVUPS Y13, (DI)
	ADDQ R10, DI
	VADDPS (DI), Y14, Y14
	VMOVUPS Y14, (DI)
	ADDQ R10, DI
	VADDPS (DI), Y15, Y15
	VMOVUPS Y15, (DI)
	VZEROUPPER
	RET
