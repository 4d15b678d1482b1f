package hfgraph

import (
	"fmt"

	"github.com/gomlx/gomlx/core/tensors"
)

// Pad lays sequences out as the inputs of Logits and TokenStats: tokens [B, width] int32, each
// row a sequence followed by zeros, and lengths [B] int32. A width of 0 means the longest
// sequence's length; a sequence longer than width is an error. Graphs are compiled per shape,
// so callers usually round B and width up to a few fixed sizes (padding rows have length 0).
func Pad(seqs [][]int32, width int) (tokens, lengths *tensors.Tensor, err error) {
	if len(seqs) == 0 {
		return nil, nil, fmt.Errorf("hfgraph: Pad: no sequences")
	}
	longest := 0
	for _, s := range seqs {
		longest = max(longest, len(s))
	}
	if width == 0 {
		width = longest
	}
	if longest > width {
		return nil, nil, fmt.Errorf("hfgraph: Pad: a sequence of %d tokens is longer than width %d", longest, width)
	}
	tok := make([]int32, len(seqs)*width)
	lens := make([]int32, len(seqs))
	for i, s := range seqs {
		copy(tok[i*width:], s)
		lens[i] = int32(len(s))
	}
	return tensors.FromFlatDataAndDimensions(tok, len(seqs), width), tensors.FromFlatDataAndDimensions(lens, len(seqs)), nil
}
