package nb

// This file is the only one that talks to the notebook. Everything else renders to strings
// or bytes, so it can be tested with go test.

import (
	"html"

	"github.com/janpfeifer/gonb/gonbui"
)

// InNotebook reports whether the program runs inside a GoNB cell (display functions are no-ops
// otherwise).
func InNotebook() bool { return gonbui.IsNotebook }

// ShowHTML displays an HTML fragment as the cell's output.
func ShowHTML(fragment string) { gonbui.DisplayHTML(fragment) }

// ShowPNG displays a PNG image as the cell's output.
func ShowPNG(png []byte) { gonbui.DisplayPNG(png) }

// updateHTML replaces the content of the output block id (created on first use).
func updateHTML(id, fragment string) { gonbui.UpdateHTML(id, fragment) }

// newDisplayID returns a fresh id for an updatable output block.
func newDisplayID() string { return "agrl_nb_" + gonbui.UniqueId() }

// showError displays err in a red box and returns it, so that a display call whose error is
// ignored in a notebook cell still shows what went wrong.
func showError(err error) error {
	if err != nil {
		ShowHTML(errorHTML(err))
	}
	return err
}

func errorHTML(err error) string {
	return `<pre style="color:#b00020;background:#fdecea;padding:6px;border-radius:4px;white-space:pre-wrap">` +
		html.EscapeString(err.Error()) + `</pre>`
}
