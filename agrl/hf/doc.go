// Package hf reads the files of a Hugging Face decoder checkpoint — safetensors weights and
// config.json — with the standard library only. It is the file layer under loading real LLMs
// (Llama 3.x, SmolLM2, Qwen2/2.5, Qwen3) into agrl's learner; it knows names, shapes and
// bytes, not models.
//
// # safetensors
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of JSON mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data
// buffer after the header) plus an optional "__metadata__" object of strings, then the data
// buffer. Open (or NewFile, over any io.ReaderAt) reads only the header and validates it
// before allocating anything sized by it: a header length past the file or MaxHeaderSize,
// malformed or duplicate-keyed JSON, an unknown dtype, a shape whose size differs from its
// offsets or overflows, and tensors that overlap, leave gaps or stop short of the end of the
// file are all errors naming the file and the tensor. Tensors are then read on demand: Bytes
// and Section give raw bytes, Float32s converts F32, F16 and BF16 exactly.
//
// Write and WriteFile produce the layout the reference implementation writes: a compact JSON
// header padded with spaces to a multiple of 8 bytes, tensors ordered widest dtype first, then
// by name. F32Tensor, BF16Tensor and F16Tensor build
// tensors from float32s, rounding to nearest even (Float32ToBF16, Float32ToF16).
//
// OpenDir opens a model directory: model.safetensors, or model.safetensors.index.json and the
// shards its weight_map names, checking that every tensor is in exactly the shard the index
// says.
//
// # config.json
//
// ParseConfig and LoadConfig read the fields of config.json that fix a supported decoder
// (see Architectures), with transformers' defaults for those omitted, and validate them.
// Config.Tensors lists the tensors a checkpoint must hold, named and shaped as transformers
// saves them, and Config.Check compares a checkpoint with that list, reporting every missing,
// unexpected and mis-shaped tensor in one *CheckError. Config.InvFreq gives the RoPE inverse
// frequencies with the config's long-context scaling: Llama 3.1's "llama3" (Llama3InvFreq),
// "linear", or "yarn" (YarnInvFreq), whose factor on cos and sin is
// Config.RopeAttentionFactor. "dynamic" (NTK) scaling, whose frequencies change with the
// sequence's length, is refused with an error.
//
// A typical load:
//
//	cfg, err := hf.LoadConfig(filepath.Join(dir, "config.json"))
//	ck, err := hf.OpenDir(dir)
//	defer ck.Close()
//	err = cfg.Check(ck)
//	w, err := ck.Float32s("model.layers.0.self_attn.q_proj.weight") // [heads·head_dim, hidden]
package hf
