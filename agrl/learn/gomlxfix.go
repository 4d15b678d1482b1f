package learn

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// Faster matmul gradients on the go backend.
//
// The go backend multiplies quickly only when the lhs contracts its last axis and at most one
// leading batch axis is shared; any other layout is first transposed, element by element.
// GoMLX v0.28.2's gradient of DotGeneral (1) contracts the batch-major axis of both operands
// for the weight gradient, so the backend transposes both of them (for a [4096, 512]
// activation that is the costliest op of a training step), and (2) always ends with a
// TransposeAllAxes back to the operand's axis order, even when that permutation is the
// identity, which the backend executes as a full copy.
//
// graph.VJPRegistration is GoMLX's documented hook for replacing an op's gradient. agrl
// replaces the DotGeneral gradient for the layouts its model uses (no batch axis or one leading
// batch axis, one contracting axis, the lhs contracting its last axis) with one that transposes
// only the smaller tensor and never an identity, and otherwise falls back to GoMLX's gradient
// with identity transposes dropped. The gradient values are the same (summation order aside).
func init() {
	orig := graph.VJPRegistration[graph.NodeTypeDotGeneral]
	if orig == nil {
		return
	}
	graph.VJPRegistration[graph.NodeTypeDotGeneral] = func(node *graph.Node, vjps []*graph.Node, outShape shapes.Shape) []*graph.Node {
		if grads, ok := matmulVJP(node, vjps[0]); ok && fastMatmulVJP {
			fastMatmulUses.Add(1)
			return grads
		}
		grads := orig(node, vjps, outShape)
		for i, g := range grads {
			if isIdentityTranspose(g) {
				grads[i] = g.Inputs()[0]
			}
		}
		return grads
	}
}

// fastMatmulVJP turns matmulVJP on (tests compare it with GoMLX's gradient); fastMatmulUses
// counts the gradients it built.
var (
	fastMatmulVJP  = true
	fastMatmulUses atomic.Int64
)

var (
	transposePerm = regexp.MustCompile(`Transpose\(x=\[#\d+\], permutation=\[([0-9 ]*)\]\)`)
	dotAxes       = regexp.MustCompile(`DotGeneral\(lhs=\[#\d+\], lhsContractingAxes=\[([0-9 ]*)\], lhsBatchAxes=\[([0-9 ]*)\], rhs=\[#\d+\], rhsContractingAxes=\[([0-9 ]*)\], rhsBatchAxes=\[([0-9 ]*)\], config=\{AccumulatorDType:InvalidDType OutputDType:InvalidDType\}\)`)
)

func parseInts(s string) ([]int, bool) {
	var out []int
	for _, f := range strings.Fields(s) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

// isIdentityTranspose reports whether n is a Transpose that keeps every axis in place. GoMLX
// does not expose a Transpose's permutation, so it is read from the node's description; when
// that fails the node is kept (the safe side).
func isIdentityTranspose(n *graph.Node) bool {
	if n == nil || n.Type() != graph.NodeTypeTranspose || len(n.Inputs()) != 1 {
		return false
	}
	m := transposePerm.FindStringSubmatch(n.String())
	if m == nil {
		return false
	}
	perm, ok := parseInts(m[1])
	if !ok {
		return false
	}
	for i, v := range perm {
		if v != i {
			return false
		}
	}
	return n.Inputs()[0].Shape().Equal(n.Shape())
}

// swapLast transposes the last two axes of x.
func swapLast(x *graph.Node) *graph.Node {
	r := x.Rank()
	perm := make([]int, r)
	for i := range perm {
		perm[i] = i
	}
	perm[r-2], perm[r-1] = r-1, r-2
	return graph.TransposeAllAxes(x, perm...)
}

// matmulVJP is the gradient of y = L·R for L [(n,) P, K] contracting K and R either [(n,) K, M]
// or [(n,) M, K], with v = dL/dy [(n,) P, M]. It reports false for any other DotGeneral.
func matmulVJP(node, v *graph.Node) ([]*graph.Node, bool) {
	m := dotAxes.FindStringSubmatch(node.String())
	if m == nil || len(node.Inputs()) != 2 {
		return nil, false
	}
	lc, ok1 := parseInts(m[1])
	lb, ok2 := parseInts(m[2])
	rc, ok3 := parseInts(m[3])
	rb, ok4 := parseInts(m[4])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, false
	}
	l, r := node.Inputs()[0], node.Inputs()[1]
	nb := len(lb)
	dt := node.DType()
	switch {
	case nb > 1 || !slices.Equal(lb, rb) || (nb == 1 && lb[0] != 0):
		return nil, false
	case l.Rank() != nb+2 || r.Rank() != nb+2 || len(lc) != 1 || len(rc) != 1 || lc[0] != nb+1:
		return nil, false
	case rc[0] != nb && rc[0] != nb+1:
		return nil, false
	case l.DType() != dt || r.DType() != dt || v.DType() != dt || !v.Shape().Equal(node.Shape()):
		return nil, false
	}
	batch := lb               // [] or [0]
	rFree := 2*nb + 1 - rc[0] // the rhs axis that is not contracted (nb or nb+1)
	// dL [(n,) P, K] = v·R contracting M: v contracts its last axis, R its free axis. The
	// backend is fastest when the rhs contracts its first (non-batch) axis: a rhs that would
	// contract its last axis runs a dot product per output element (7× slower for a
	// [384, 32]·[32, 128] product, docs/performance.md), so R [(n,) K, M] is transposed first
	// (a weight, or an attention operand no larger than v).
	var dl *graph.Node
	if rFree == nb+1 {
		dl = graph.DotGeneral(v, []int{nb + 1}, batch, swapLast(r), []int{nb}, batch)
	} else {
		dl = graph.DotGeneral(v, []int{nb + 1}, batch, r, []int{rFree}, batch)
	}
	// dR: contract over P. Transpose whichever of L [P, K] and v [P, M] is smaller so that the
	// lhs contracts its last axis; the result may need a (small) transpose into R's layout.
	var dr *graph.Node
	kDim, mDim := l.Shape().Dimensions[nb+1], v.Shape().Dimensions[nb+1]
	if kDim <= mDim {
		km := graph.DotGeneral(swapLast(l), []int{nb + 1}, batch, v, []int{nb}, batch) // [(n,) K, M]
		if rc[0] == nb {
			dr = km
		} else {
			dr = swapLast(km)
		}
	} else {
		mk := graph.DotGeneral(swapLast(v), []int{nb + 1}, batch, l, []int{nb}, batch) // [(n,) M, K]
		if rc[0] == nb+1 {
			dr = mk
		} else {
			dr = swapLast(mk)
		}
	}
	if !dl.Shape().Equal(l.Shape()) || !dr.Shape().Equal(r.Shape()) {
		return nil, false
	}
	return []*graph.Node{dl, dr}, true
}
