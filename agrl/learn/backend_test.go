package learn

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute"
)

func TestParseBackend(t *testing.T) {
	for _, ok := range []string{"go", "go:ops_sequential", "go:ops_sequential,parallelism=2", "xla:cuda", "xla:cpu,preallocate=false"} {
		if strings.HasPrefix(ok, "xla") && !slices.Contains(compute.List(), "xla") {
			continue // built with -tags noxla
		}
		if _, err := ParseBackend(ok); err != nil {
			t.Errorf("ParseBackend(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"nope", "nope:x", "go:turbo", "go:parallelism=x", "go:ops_sequential=1", "xla", "xla:"} {
		if _, err := ParseBackend(bad); err == nil {
			t.Errorf("ParseBackend(%q) accepted", bad)
		}
	}
	t.Setenv(BackendEnv, "")
	t.Setenv("GOMLX_BACKEND", "")
	if got := BackendFromEnv(); got != DefaultBackend {
		t.Errorf("BackendFromEnv = %q", got)
	}
	t.Setenv("GOMLX_BACKEND", "go")
	if got := BackendFromEnv(); got != "go" {
		t.Errorf("BackendFromEnv with GOMLX_BACKEND = %q", got)
	}
	t.Setenv(BackendEnv, "xla:cuda")
	if got := BackendFromEnv(); got != "xla:cuda" {
		t.Errorf("BackendFromEnv with %s = %q", BackendEnv, got)
	}
}

func TestNewBackend(t *testing.T) {
	b, err := NewBackend("go:ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	b2, err := NewBackend(" go:ops_sequential ")
	if err != nil || b2 != b {
		t.Errorf("same configuration should share the backend: %v", err)
	}
	// An unknown name is an error, not a GoMLX panic.
	if _, err := NewBackend("nosuch:thing"); err == nil || !strings.Contains(err.Error(), "unknown backend") {
		t.Errorf("unknown backend: %v", err)
	}
}

func TestNewBackendMissingPlugin(t *testing.T) {
	// No PJRT plugin lives here: asking for one must fail at once with a clear error (no
	// download, no hang, no panic).
	t.Setenv("PJRT_PLUGIN_LIBRARY_PATH", t.TempDir())
	_, err := NewBackend("xla:nosuchplugin")
	if err == nil {
		t.Fatal("xla with a missing plugin started")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "nosuchplugin") {
		t.Errorf("error does not name the plugin: %v", err)
	}
	if _, err := NewBackend("xla:/no/such/file.so"); err == nil {
		t.Error("xla with a missing plugin file started")
	}
}
