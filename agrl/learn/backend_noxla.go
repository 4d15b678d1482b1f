//go:build noxla

package learn

// In a build with -tags noxla no "xla" backend is registered: ParseBackend reports an XLA
// configuration as an unknown backend, with a hint about the tag.
