// Package hfgraph builds GoMLX graphs of the pretrained decoders agrl/llm runs on the host —
// Llama 3.x and SmolLM2, Qwen2/2.5, Qwen3 — so that they can be trained with automatic
// differentiation, with LoRA adapters, on any GoMLX backend (the pure-Go "go" backend on CPU,
// XLA on GPUs). agrl/llm is the reference: for the same weights and adapters the graph's
// per-token log-probabilities agree with log-softmax of llm.Model.Logits to about 2e-6 on its
// test checkpoints (the tests allow 1e-4).
//
// # Weights
//
// Load reads a Hugging Face checkpoint directory (FromLLM takes an agrl/llm model) into
// variables of a model.Store: the base weights, frozen (not trainable), under
// <scope>/base/<checkpoint tensor name>, projections transposed to [in, out]. AddLoRA adds
// adapters initialised exactly as llm.Model.AddLoRA initialises them (B zero, so the model
// starts as its base, bit for bit); SetAdapters copies an llm.Adapters in (from AddLoRA or a
// PEFT directory read by llm.LoadAdapters); ExportAdapters and Adapters copy them back out, for
// llm.Adapters.Save to write a PEFT adapter or llm.Model.Save to merge them into a checkpoint.
// Adapter matrices are trainable variables under <scope>/lora; the adapted projection is
//
//	y = x·W + b + (alpha/r)·((x·A)·B)                      // A [in, r], B [r, out]
//
// Base returns the same model without the adapter term, sharing every variable: the frozen
// reference policy of GRPO costs no memory.
//
// # Graphs
//
// Logits and TokenStats take a batch of right-padded sequences, tokens [B, T] and lengths [B]
// (Pad lays them out). The decoder is the one agrl/llm documents: RMSNorm, rotate-half RoPE
// with the config's theta and scaling (hf.Config.InvFreq and RopeAttentionFactor),
// grouped-query causal attention that also masks each row's padding, q/k/v biases (Qwen2,
// Llama's attention_bias), Qwen3's per-head q_norm and k_norm, the SwiGLU MLP (with Llama's
// mlp_bias), and a tied or untied LM head. TokenStats has the contract of the Tiny model's scorer in agrl/learn: logp
// and entropy [B, T-1] at an inverse temperature, position j about token j+1, plus a 0/1 mask of
// the positions whose target is a real token (logp and entropy are 0 elsewhere).
//
// A training step builds its loss from TokenStats and takes gradients the GoMLX way: graph.
// Gradient over AdapterVariables, or an optimizer's UpdateGraph over the store's trainable
// variables (only the adapters are).
//
//	store := model.NewStore()
//	pol := hfgraph.MustLoad(store, "", "Qwen3-0.6B")
//	err := pol.AddLoRA(llm.LoRAConfig{Rank: 8, Alpha: 16, TargetModules: llm.LoRAModules()}, 1)
//	opt := optimizer.Adam().LearningRate(1e-4).Done()
//	step, err := model.NewExec(backend, store, func(scope *model.Scope, tokens, lengths *graph.Node) *graph.Node {
//		logp, _, valid := pol.TokenStats(tokens, lengths, nil)
//		loss := graph.Neg(graph.Div(graph.ReduceAllSum(logp), graph.ReduceAllSum(valid)))
//		opt.UpdateGraph(scope, tokens.Graph(), loss)
//		return loss
//	})
//
// # Segments
//
// For a training step whose whole graph would not fit in memory (one long sequence), the
// decoder is also available in pieces, each its own graph: Embed (tokens to the residual
// stream), Layer (one decoder layer, its weights given as nodes in LayerVariables order, so
// that one compiled graph serves every layer) and HeadStats (the final norm, the head and
// TokenStats' statistics over any subset of positions, so a long sequence's head can go in
// chunks). A caller keeps the residual stream between them and takes the backward pass piece
// by piece, recomputing each piece's forward pass and differentiating Σ y·dy, the
// vector–Jacobian product (agrl/learn does, on the go backend: docs/llm.md). On a Dropout
// view each Layer draws the masks the whole graph draws for that layer and returns the
// advanced RNG state.
//
// # Weights in bfloat16
//
// LoadAs (and FromLLMAs) store the base weights in bfloat16 instead, half the memory on the
// backend; the graphs convert them to float32 where they read them, so the model computes what
// the float32 model of its bfloat16-rounded weights computes — for a checkpoint saved in
// bfloat16, exactly Load's model (TestBF16Storage, every family, with and without adapters).
// The adapters stay float32; such weights cannot be trained (TrainBase refuses).
//
// SetCompute(BFloat16) makes the projections' products mixed precision, as GPUs run them fast:
// inputs and results rounded to bfloat16, sums in float32; the LM head, norms, RoPE, attention
// and the adapters stay float32 (TestMatmulBF16 works the rounding by hand; TestBF16Compute:
// log-probs within 0.017 of float32 on every family, adapter gradients' cosine above 0.9999,
// decoding within 2.5e-3 of scoring).
//
// # Decoding
//
// Decode is the incremental form of Logits, for sampling on a backend: each sequence's KV
// cache is a tensor of CacheShape (its keys already rotated), and a call appends a batch of
// rows' new tokens — a prompt, one sampled token, an observation — at each row's own position,
// returning the logits after each row's last new token and the updated caches. Its log-softmax
// agrees with agrl/llm's full forward pass to about 3e-6 on the test checkpoints (the test
// allows 1e-4). agrl/learn drives it as an agent.Decoder (agrl.PretrainedLM.Decoding).
//
// # Limits
//
// Everything is computed in float32 (bfloat16 is a storage of the base weights only). LoRA dropout applies in the graphs of the Dropout view only (a
// training step's), from an RNG state the caller feeds. Decode writes the new positions with a
// select over the whole cache (the go backend has no DynamicUpdateSlice), so a step streams
// every cache of its batch once; a caller that donates a cache's buffer lets XLA reuse its
// memory for the result. Graphs are compiled per input shape, so batch sizes and lengths should be
// bucketed.
package hfgraph
