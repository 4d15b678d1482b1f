package hfgraph_test

import (
	"fmt"

	"agrl.dev/agrl/learn/hfgraph"
	"agrl.dev/agrl/llm"
	"github.com/gomlx/compute"
	_ "github.com/gomlx/compute/gobackend"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/train/optimizer"
)

// Fine-tune LoRA adapters of a (tiny, random) Qwen3 checkpoint with Adam, then hand them to
// agrl/llm, which saves PEFT adapters.
func Example() {
	backend, err := compute.NewWithConfig("go:ops_sequential")
	if err != nil {
		panic(err)
	}
	store := model.NewStore()
	pol := hfgraph.MustLoad(store, "", "../../llm/testdata/qwen3")
	lora := llm.LoRAConfig{Rank: 4, Alpha: 8, TargetModules: []string{"q_proj", "v_proj"}}
	if err := pol.AddLoRA(lora, 1); err != nil {
		panic(err)
	}

	opt := optimizer.Adam().LearningRate(1e-2).Done()
	step, err := model.NewExec(backend, store, func(scope *model.Scope, tokens, lengths *graph.Node) *graph.Node {
		logp, _, valid := pol.TokenStats(tokens, lengths, nil)                            // [B, T-1]
		loss := graph.Neg(graph.Div(graph.ReduceAllSum(logp), graph.ReduceAllSum(valid))) // mean NLL
		opt.UpdateGraph(scope, tokens.Graph(), loss)                                      // adapters only: the base is frozen
		return loss
	})
	if err != nil {
		panic(err)
	}
	tokens, lengths, err := hfgraph.Pad([][]int32{{1, 17, 42, 99, 7}, {1, 5, 5}}, 8)
	if err != nil {
		panic(err)
	}
	var first, last float32
	for i := range 10 {
		out, err := step.Call(tokens, lengths)
		if err != nil {
			panic(err)
		}
		last = out[0].Value().(float32)
		if i == 0 {
			first = last
		}
	}
	fmt.Println("loss went down:", last < first)

	base, err := llm.Load("../../llm/testdata/qwen3")
	if err != nil {
		panic(err)
	}
	adapters, err := pol.Adapters(base) // ready for adapters.Save(dir)
	if err != nil {
		panic(err)
	}
	fmt.Println("adapter values:", adapters.NumParams())
	// Output:
	// loss went down: true
	// adapter values: 2560
}
