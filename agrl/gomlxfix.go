package agrl

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// GoMLX v0.28.2's gradient of DotGeneral always ends with a TransposeAllAxes back to the
// operand's axis order, even when that permutation is the identity, and the go backend executes
// an identity transpose as a full element-by-element copy. In a training step of the Tiny model
// those copies took a quarter of the time. graph.VJPRegistration is GoMLX's documented hook for
// replacing an op's gradient, so agrl wraps the DotGeneral gradient to drop identity transposes
// (the dropped nodes are dead code, which the backends never execute). The gradient values are
// unchanged.
func init() {
	orig := graph.VJPRegistration[graph.NodeTypeDotGeneral]
	if orig == nil {
		return
	}
	graph.VJPRegistration[graph.NodeTypeDotGeneral] = func(node *graph.Node, vjps []*graph.Node, outShape shapes.Shape) []*graph.Node {
		grads := orig(node, vjps, outShape)
		for i, g := range grads {
			if isIdentityTranspose(g) {
				grads[i] = g.Inputs()[0]
			}
		}
		return grads
	}
}

var transposePerm = regexp.MustCompile(`Transpose\(x=\[#\d+\], permutation=\[([0-9 ]*)\]\)`)

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
	for i, f := range strings.Fields(m[1]) {
		if v, err := strconv.Atoi(f); err != nil || v != i {
			return false
		}
	}
	return n.Inputs()[0].Shape().Equal(n.Shape())
}
