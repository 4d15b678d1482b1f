# agrl — common tasks. `make test` is what CI runs (.ci/run calls it).
GO       ?= go
FUZZTIME ?= 60s
BIN      := bin
# Notebooks run with Debian's python3 (the first python3 on PATH may lack Jupyter) and with the
# pinned gonb and goimports that scripts/notebook-deps.sh builds into .tools/bin.
PYTHON   ?= /usr/bin/python3
JUPYTER  ?= /usr/bin/jupyter
TOOLS    := $(CURDIR)/.tools/bin
NOTEBOOKS = $(sort $(wildcard tutorials/*.ipynb notebooks/*.ipynb))
# AGRL_QUICK=1 (the default for `make notebooks`) asks training notebooks for short runs; set it
# empty (`make notebooks AGRL_QUICK=`) to run them in full.
AGRL_QUICK ?= 1

.PHONY: all test go-test vet fmt-check build train demo bench bench-peer bench-llm acceptance gpu-check gpu-bundle fuzz clean notebook-deps notebooks notebooks-update jupyter

all: build test

## test: formatting and vet checks, every package's tests (examples and fuzz seed corpora
## included), then every notebook headlessly in quick mode
test: go-test notebooks

## go-test: the Go part of test only; the learner's package and the CLI run twice, the second
## time built with GOEXPERIMENT=simd, where training, scoring and sampling take the host path's
## AVX-512/AVX2 kernels (on CPUs that have them) instead of the GoMLX graphs
go-test: fmt-check vet
	$(GO) test -count=1 -timeout 30m ./...
	GOEXPERIMENT=simd $(GO) test -count=1 -timeout 30m ./agrl/learn/ ./agrl/cmd/agrl/

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

## build: the agrl command in bin/
build:
	$(GO) build -o $(BIN)/agrl ./agrl/cmd/agrl

## train: the main job: SFT warm start then GRPO on the calculator, on the CPU, with defaults
## (ARGS="--steps 50" adds flags). Built with GOEXPERIMENT=simd: the go backend's AVX kernels.
train:
	GOEXPERIMENT=simd $(GO) build -o $(BIN)/agrl-simd ./agrl/cmd/agrl
	$(BIN)/agrl-simd train --env calc $(ARGS)

## bench: sampling and training throughput of the Tiny policy (tokens/s, GFLOP/s, share of peak)
bench:
	GOEXPERIMENT=simd $(GO) test -run '^$$' -bench 'Sample|Train' -benchtime 5x ./agrl/learn/

## bench-peer: the same benchmarks side by side with the same model in PyTorch (Debian's
## python3-torch, installed when missing), A B A B, with the ratio per round (ARGS="--rounds 5")
bench-peer:
	$(PYTHON) scripts/bench_peer.py $(ARGS)

## bench-llm: the pretrained path at a real shape with random weights (prefill, decode at batch
## 1 and 8, LoRA training tokens/s), side by side with the same decoder in PyTorch
## (ARGS="qwen3-0.6b 3"; ARGS="smollm2-135m 2 full": the training step fine-tunes every weight)
bench-llm:
	scripts/bench_llm.sh $(ARGS)

## acceptance: measurements that train for minutes (simd build): the calc SFT warm start
acceptance:
	AGRL_ACCEPTANCE=1 GOEXPERIMENT=simd $(GO) test -count=1 -timeout 30m -v -run 'TestSFTWarmStartIsWellFormed' ./agrl/learn/

## gpu-check: the policy's tests and benchmarks on xla:cuda (needs an NVIDIA GPU and a PJRT plugin)
gpu-check:
	scripts/gpu-check.sh

## gpu-bundle: the test binaries gpu-check runs on a GPU machine without Go (.gpu; see
## scripts/device-check.sh and docs/llm.md, "On a GPU")
gpu-bundle:
	scripts/gpu-bundle.sh

## demo: a tour without training (for now: tasks of every environment, each solved by its expert, with rewards)
demo:
	$(GO) run ./agrl/cmd/agrl envs
	$(GO) run ./agrl/cmd/agrl sample --env calc --difficulty hard -n 2
	$(GO) run ./agrl/cmd/agrl sample --env multihop -n 1
	$(GO) run ./agrl/cmd/agrl sample --env filesearch -n 1

## fuzz: run every fuzz target for FUZZTIME each (default 60s), one after another, and list the
## failures at the end (scripts/fuzz.sh: a target that Go 1.26 ends at the deadline without an
## input, go.dev/issue/75804, is run once more)
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) scripts/fuzz.sh

## notebook-deps: Jupyter (Debian packages), GoNB and goimports (pinned, in .tools/bin), the kernel spec; idempotent
notebook-deps:
	bash scripts/notebook-deps.sh

## notebooks: execute every notebook in tutorials/ and notebooks/ headlessly; fails on the first failing cell
notebooks: notebook-deps
	@if [ -z "$(NOTEBOOKS)" ]; then echo "notebooks: none found"; exit 0; fi
	env $(if $(AGRL_QUICK),AGRL_QUICK=$(AGRL_QUICK),-u AGRL_QUICK) PATH="$(TOOLS):$$PATH" \
	  $(PYTHON) scripts/run_notebooks.py $(NOTEBOOKS)

## notebooks-update: re-execute every notebook in full mode and write the outputs back (commit them)
notebooks-update: notebook-deps
	env -u AGRL_QUICK PATH="$(TOOLS):$$PATH" $(PYTHON) scripts/run_notebooks.py --inplace $(NOTEBOOKS)

## jupyter: open Jupyter on the repository with the GoNB kernel (start with tutorials/);
## extra flags in JUPYTER_ARGS, e.g. make jupyter JUPYTER_ARGS="--no-browser --port=8890"
jupyter: notebook-deps
	PATH="$(TOOLS):$$PATH" $(JUPYTER) notebook --notebook-dir="$(CURDIR)" $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(JUPYTER_ARGS)

clean:
	rm -rf $(BIN)

## tokenizer-check: regenerate agrl/bpe's golden data with the Hugging Face JS tokenizers (npm ci
## in scripts/tokenizer_check, then gen_nfc.mjs and check.mjs), then go test ./agrl/bpe/
.PHONY: tokenizer-check
tokenizer-check:
	cd scripts/tokenizer_check && npm ci --no-audit --no-fund
	node scripts/tokenizer_check/gen_nfc.mjs
	node scripts/tokenizer_check/check.mjs
	$(GO) test -count=1 ./agrl/bpe/
