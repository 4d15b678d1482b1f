# agrl — common tasks. `make test` is what CI runs (.ci/run calls it).
GO       ?= go
FUZZTIME ?= 60s
BIN      := bin

.PHONY: all test vet fmt-check build demo fuzz clean

all: build test

## test: formatting and vet checks, then every package's tests (examples and fuzz seed corpora included)
test: fmt-check vet
	$(GO) test -count=1 ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

## build: the agrl command in bin/
build:
	$(GO) build -o $(BIN)/agrl ./agrl/cmd/agrl

## demo: the main job (for now: tasks of every environment, each solved by its expert, with rewards)
demo:
	$(GO) run ./agrl/cmd/agrl envs
	$(GO) run ./agrl/cmd/agrl sample --env calc --difficulty hard -n 2
	$(GO) run ./agrl/cmd/agrl sample --env multihop -n 1
	$(GO) run ./agrl/cmd/agrl sample --env filesearch -n 1

## fuzz: run every fuzz target for FUZZTIME each (default 60s), one after another
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$target"; \
	    $(GO) test $$pkg -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -parallel 2; \
	  done; \
	done

clean:
	rm -rf $(BIN)
