package learn

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	_ "github.com/gomlx/compute/gobackend" // registers the pure-Go "go" backend
)

// Backend selection.
//
// agrl never lets GoMLX pick a backend by itself: compute.New() with no configuration tries
// XLA, tries to download a PJRT plugin from the internet and does not fall back, and an unknown
// backend name panics inside GoMLX. Every policy is built on a backend named explicitly, checked
// by ParseBackend before GoMLX sees it.
//
// Configurations read "NAME[:OPTIONS]":
//
//	go:ops_sequential     the pure-Go backend, ops run one after the other (the default; on a
//	                      2-core machine the parallel modes hang intermittently inside large
//	                      matmuls). Build with GOEXPERIMENT=simd to turn on its AVX2/AVX-512
//	                      kernels: training runs 2–3× faster (the first build takes about a minute).
//	xla:cuda              XLA on an NVIDIA GPU; the PJRT plugin is searched in
//	                      $PJRT_PLUGIN_LIBRARY_PATH, ~/.local/lib/go-xla and /usr/local/lib/go-xla.
//	xla:cpu               XLA on the CPU, when its plugin is installed.
//
// A missing plugin is an error at once: agrl turns XLA's auto-install (a download) off.
// Binaries built with -tags noxla have no XLA backend and report so.
const (
	// DefaultBackend is the backend used when neither the policy nor the environment names one.
	DefaultBackend = "go:ops_sequential"
	// BackendEnv names the environment variable that overrides DefaultBackend. GOMLX_BACKEND
	// is read when it is unset.
	BackendEnv = "AGRL_BACKEND"
)

// goBackendOptions are the options the pure-Go backend accepts (compute v0.1.2).
var goBackendOptions = []string{"parallelism", "ops_sequential", "ops_parallel", "dependency_order", "creation_order"}

// xlaNames are the names the XLA backend registers.
var xlaNames = []string{"xla", "stablehlo", "hlo", "shlo"}

// BackendConfig is a parsed backend configuration.
type BackendConfig struct {
	// Name is the registered backend name ("go", "xla").
	Name string
	// Options is the text after the first colon, passed to the backend unchanged.
	Options string
}

// String renders the configuration back as "NAME[:OPTIONS]".
func (c BackendConfig) String() string {
	if c.Options == "" {
		return c.Name
	}
	return c.Name + ":" + c.Options
}

// IsXLA reports whether the configuration names the XLA backend.
func (c BackendConfig) IsXLA() bool { return slices.Contains(xlaNames, c.Name) }

// Plugin returns the PJRT plugin an XLA configuration asks for ("cuda", "cpu", or an absolute
// path), and "" for other backends.
func (c BackendConfig) Plugin() string {
	if !c.IsXLA() {
		return ""
	}
	p, _, _ := strings.Cut(c.Options, ",")
	return p
}

// BackendFromEnv returns the configuration named by $AGRL_BACKEND, else $GOMLX_BACKEND, else
// DefaultBackend.
func BackendFromEnv() string {
	for _, k := range []string{BackendEnv, compute.ConfigEnvVar} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v
		}
	}
	return DefaultBackend
}

// ParseBackend validates a backend configuration without creating the backend. An empty
// string means BackendFromEnv(). It reports unknown backend names (with the list of those
// compiled in), unknown options of the go backend, and an XLA configuration without a plugin.
func ParseBackend(config string) (BackendConfig, error) {
	config = strings.TrimSpace(config)
	if config == "" {
		config = BackendFromEnv()
	}
	name, opts, _ := strings.Cut(config, ":")
	c := BackendConfig{Name: strings.TrimSpace(name), Options: strings.TrimSpace(opts)}
	known := compute.List()
	slices.Sort(known)
	if !slices.Contains(known, c.Name) {
		hint := ""
		if c.IsXLA() {
			hint = " (this binary was built with -tags noxla)"
		}
		return c, fmt.Errorf("agrl: unknown backend %q in %q%s: compiled-in backends are %s", c.Name, config, hint, strings.Join(known, ", "))
	}
	switch {
	case c.Name == "go":
		var errs []error
		for part := range strings.SplitSeq(c.Options, ",") {
			key, val, hasVal := strings.Cut(strings.TrimSpace(part), "=")
			switch {
			case key == "":
			case !slices.Contains(goBackendOptions, key):
				errs = append(errs, fmt.Errorf("unknown option %q (want %s)", key, strings.Join(goBackendOptions, ", ")))
			case key == "parallelism":
				if n, err := strconv.Atoi(val); !hasVal || err != nil || n < 0 {
					errs = append(errs, fmt.Errorf("parallelism=%q: want an integer >= 0 (0: every op on the calling goroutine)", val))
				}
			case hasVal:
				errs = append(errs, fmt.Errorf("option %q takes no value", key))
			}
		}
		if len(errs) > 0 {
			return c, fmt.Errorf("agrl: backend %q: %w", config, errors.Join(errs...))
		}
	case c.IsXLA():
		if c.Plugin() == "" {
			return c, fmt.Errorf("agrl: backend %q names no PJRT plugin: write xla:cuda or xla:cpu", config)
		}
	}
	return c, nil
}

// xlaCheck, when set (in builds with XLA), reports why an XLA configuration cannot start, before
// GoMLX tries it: a missing plugin is an error here, never a download or a hang.
var xlaCheck func(c BackendConfig) error

var (
	backendsMu sync.Mutex
	backends   = map[string]compute.Backend{}
)

// NewBackend validates config (see ParseBackend; "" means BackendFromEnv()) and returns the
// backend, shared by every caller that names the same configuration. GoMLX panics are turned
// into errors.
func NewBackend(config string) (compute.Backend, error) {
	c, err := ParseBackend(config)
	if err != nil {
		return nil, err
	}
	key := c.String()
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if b, ok := backends[key]; ok && !b.IsFinalized() {
		return b, nil
	}
	if c.IsXLA() && xlaCheck != nil {
		if err := xlaCheck(c); err != nil {
			return nil, err
		}
	}
	var b compute.Backend
	err = catch(func() error {
		var err error
		b, err = compute.NewWithConfig(key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("agrl: backend %q failed to start: %w", key, err)
	}
	backends[key] = b
	return b, nil
}

// MustNewBackend is NewBackend for notebooks: it panics on error.
func MustNewBackend(config string) compute.Backend {
	b, err := NewBackend(config)
	if err != nil {
		panic(err)
	}
	return b
}

// catch runs fn and turns a panic inside it into an error.
func catch(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = fmt.Errorf("gomlx panic: %w", e)
			} else {
				err = fmt.Errorf("gomlx panic: %v", r)
			}
		}
	}()
	return fn()
}
