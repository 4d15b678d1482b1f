//go:build !noxla

package learn

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gomlx/go-xla/compute/xla" // registers the "xla" backend
	"github.com/gomlx/go-xla/pjrt"
)

func init() {
	// Never download a plugin: a missing one must be a clear error at once.
	xla.EnableAutoInstall(false)
	xlaCheck = checkXLAPlugin
}

// checkXLAPlugin reports a missing PJRT plugin before GoMLX looks for it.
func checkXLAPlugin(c BackendConfig) error {
	plugin := c.Plugin()
	if filepath.IsAbs(plugin) {
		if _, err := os.Stat(plugin); err != nil {
			return fmt.Errorf("agrl: backend %q: PJRT plugin file: %w", c, err)
		}
		return nil
	}
	found := pjrt.AvailablePlugins()
	names := make([]string, 0, len(found))
	for name := range found {
		names = append(names, name)
		if name == plugin || strings.HasPrefix(name, plugin+"_") {
			return nil
		}
	}
	sort.Strings(names)
	where := "$PJRT_PLUGIN_LIBRARY_PATH (unset), ~/.local/lib/go-xla, /usr/local/lib/go-xla and the system library paths"
	if p := os.Getenv("PJRT_PLUGIN_LIBRARY_PATH"); p != "" {
		where = fmt.Sprintf("$PJRT_PLUGIN_LIBRARY_PATH=%q", p)
	}
	have := "none"
	if len(names) > 0 {
		have = strings.Join(slices.Compact(names), ", ")
	}
	return fmt.Errorf("agrl: backend %q: no PJRT plugin %q found in %s (plugins found: %s); "+
		"install pjrt_c_api_%s_plugin.so there, or use %s", c, plugin, where, have, plugin, DefaultBackend)
}
